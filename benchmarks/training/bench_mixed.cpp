// strata-bench-mixed: mixed precision in one run.
//   1. Training throughput and memory per rank of fp32 vs 16-bit precision on
//      W2 (784-1024-1024-10, batch 256) and W3 (4096 x 4 wide MLP, batch 512),
//      one rank x 2 threads, SGD. Memory: bytes allocated (parameters,
//      gradients, optimizer state, fp32 master weights, activations), and of
//      those the activations (sizes of the buffers the model allocated). A
//      precision "bf16-emulated" (or "fp16-emulated") runs the emulated
//      storage (float buffers holding 16-bit values) for comparison.
//   2. Gradient allreduce payload per step and rank, and step time, on 2
//      thread ranks x 1 thread, without and with 16-bit compression.
// Each: warm-up steps, then --reps repetitions of the workload's steps;
// median [min-max] samples/s.
#include "apps/common/app_main.hpp"
#include "apps/common/cli.hpp"
#include "backends/ranks.hpp"
#include "backends/runtime.hpp"
#include "benchmarks/common/bench_utils.hpp"
#include "benchmarks/common/workloads.hpp"
#include "data/dataset.hpp"
#include "layers/mlp.hpp"
#include "strategies/data_parallel.hpp"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <sstream>

namespace strata::bench {
namespace {

struct Run {
  Stats samples_per_s;
  double allocated = 0, activations = 0;  // bytes per rank
  double comm_bytes = 0;             // allreduce payload per step and rank
  double exposed_ms = 0;             // communication waited for after backward, per step
  double loss = 0;                   // last loss (sanity)
};

Run run_rank(const Workload& w, Context& ctx, comm::Communicator& comm, Precision precision,
             bool emulated, GradCompression compression, int reps, int warmup) {
  const auto shard = data::BatchLoader<float>::shard(w.batch, comm.rank(), comm.size());
  auto model = make_mlp<float>({w.widths});
  BuildOptions build;
  build.max_batch = std::max<std::size_t>(1, shard.second);
  build.numerics.storage = precision;
  build.numerics.emulated = emulated;
  model.build(build);
  model.init(Init::kaiming_uniform, 1);
  SoftmaxCrossEntropy<float> loss;
  const OptimizerConfig oc{OptimizerKind::sgd, 0.01};
  Optimizer<float> opt(oc, model.num_params());
  DataParallelOptions o;
  o.precision = precision;
  o.emulate_storage = emulated;
  o.compression = compression;
  // As strata-train runs them: fp16 training, and fp16 gradient buckets,
  // with dynamic loss scaling.
  o.loss_scaling = precision == Precision::fp16 || compression == GradCompression::fp16;
  DataParallel<float> dp(ctx, comm, model, loss, opt, o);
  auto d = data::make_synthetic(w.batch, w.widths.front(), data::CsvTask::classification,
                                w.widths.back(), 3);
  data::BatchLoader<float> loader(d, w.batch, false, 0, false, comm.rank(), comm.size());
  data::Batch<float> b;
  loader.next(b);
  Run run;
  for (int i = 0; i < warmup; ++i) run.loss = dp.step(b, w.batch);
  std::vector<double> rates;
  double exposed = 0;
  for (int r = 0; r < reps; ++r) {
    comm.barrier();
    const auto t0 = Clock::now();
    for (std::size_t s = 0; s < w.steps; ++s) {
      run.loss = dp.step(b, w.batch);
      exposed += dp.last_timing().exposed_comm_s;
    }
    comm.barrier();
    rates.push_back(w.batch * w.steps / seconds(t0, Clock::now()));
  }
  run.samples_per_s = stats(rates);
  run.comm_bytes = static_cast<double>(dp.last_info().comm_bytes);
  run.exposed_ms = 1e3 * exposed / (reps * w.steps);
  const double n = static_cast<double>(model.num_params());
  const double state = static_cast<double>(opt.state_bytes());
  run.activations = static_cast<double>(model.allocated_activation_bytes());
  const bool mixed = precision != Precision::fp32;
  // Allocated: params (working weights) + grads + state + master + activations.
  run.allocated = 4 * n + 4 * n + state + (mixed ? 4 * n : 0) + run.activations;
  return run;
}

}  // namespace
}  // namespace strata::bench

int main(int argc, char** argv) {
  using namespace strata;
  using namespace strata::bench;
  std::unique_ptr<Runtime> runtime;
  return app::guarded("strata-bench-mixed", [&] {
    auto args = app::split_kokkos_args(argc, argv);
    std::string which = "W2,W3", precisions = "fp32,bf16,bf16-emulated", compressions = "none,bf16";
    int reps = 3, warmup = 2;
    double scale = 1.0;
    CLI::App cli{"Mixed precision: samples/s and memory of fp32 vs 16-bit training, and "
                 "gradient allreduce bytes with and without compression.", "strata-bench-mixed"};
    cli.add_option("--workloads", which, "comma-separated: W2, W3")->capture_default_str();
    cli.add_option("--precisions", precisions,
                   "comma-separated: fp32, bf16, fp16, bf16-emulated, fp16-emulated")
        ->capture_default_str();
    cli.add_option("--compressions", compressions, "comma-separated: none, bf16, fp16")->capture_default_str();
    cli.add_option("--reps", reps, "repetitions")->capture_default_str()->check(CLI::Range(1, 100));
    cli.add_option("--warmup", warmup, "warm-up steps")->capture_default_str();
    cli.add_option("--scale", scale, "multiply the steps per repetition (e.g. 0.05 for a smoke test)")
        ->capture_default_str();
    if (!app::parse_cli(cli, args.program)) return app::exit_ok;
    auto list = [](const std::string& text) {
      std::vector<std::string> out;
      std::stringstream ss(text);
      for (std::string s; std::getline(ss, s, ',');) out.push_back(s);
      return out;
    };
    std::vector<std::pair<Precision, bool>> ps;  // precision, emulated storage
    for (auto p : list(precisions)) {
      const std::string suffix = "-emulated";
      const bool emulated = p.size() > suffix.size() &&
                            p.compare(p.size() - suffix.size(), suffix.size(), suffix) == 0;
      if (emulated) p.resize(p.size() - suffix.size());
      ps.push_back({parse_precision(p), emulated});
      STRATA_REQUIRE(!emulated || ps.back().first != Precision::fp32, config,
                     "--precisions: fp32 has no emulated storage");
    }
    std::vector<GradCompression> cs;
    for (const auto& c : list(compressions)) cs.push_back(parse_grad_compression(c));
    const std::vector<Workload> chosen = select_workloads(which, "--workloads", {"W2", "W3"});
    std::string threads = kokkos_threads_option(2);
    args.kokkos.insert(args.kokkos.end() - 1, threads.data());
    int kargc = static_cast<int>(args.kokkos.size()) - 1;
    runtime = std::make_unique<Runtime>(kargc, args.kokkos.data());
    std::printf("# strata-bench-mixed: %d repetitions, median [min-max] samples/s; * = max/min > 1.2\n# %s\n",
                reps, configuration().c_str());
    std::printf("# 1 rank x 2 threads, SGD; 'allocated': parameters, gradients, optimizer state,\n"
                "# fp32 master weights and activations; 'activations': of those, the activation buffers\n");
    std::printf("%-4s %-13s %28s %14s %14s\n", "load", "precision", "samples/s: median [min-max]",
                "allocated", "activations");
    for (auto w : chosen) {
      w.steps = std::max<std::size_t>(1, static_cast<std::size_t>(w.steps * scale));
      for (const auto& [p, emulated] : ps) {
        Run r;
        run_ranks(1, 2, [&, p = p, emulated = emulated](Context& ctx, comm::Communicator& comm) {
          r = run_rank(w, ctx, comm, p, emulated, GradCompression::none, reps, warmup);
        });
        const std::string name = std::string(to_string(p)) + (emulated ? "-emulated" : "");
        std::printf("%-4s %-13s %28s %14s %14s\n", w.name.c_str(), name.c_str(),
                    rate_text(r.samples_per_s).c_str(), format_bytes(r.allocated).c_str(),
                    format_bytes(r.activations).c_str());
        std::fflush(stdout);
      }
    }
    std::printf("# gradient allreduce, 2 thread ranks x 1 thread: payload per step and rank\n");
    std::printf("%-4s %-11s %14s %28s %12s\n", "load", "compression", "bytes/step",
                "samples/s: median [min-max]", "exposed ms");
    for (auto w : chosen) {
      w.steps = std::max<std::size_t>(1, static_cast<std::size_t>(w.steps * scale));
      for (GradCompression c : cs) {
        Run r;
        run_ranks(2, 1, [&](Context& ctx, comm::Communicator& comm) {
          auto mine = run_rank(w, ctx, comm, Precision::fp32, false, c, reps, warmup);
          if (comm.rank() == 0) r = mine;
        });
        char ms[32];
        std::snprintf(ms, sizeof ms, "%.2f", r.exposed_ms);
        std::printf("%-4s %-11s %14s %28s %12s\n", w.name.c_str(), to_string(c),
                    format_bytes(r.comm_bytes).c_str(), rate_text(r.samples_per_s).c_str(), ms);
        std::fflush(stdout);
      }
    }
    return app::exit_ok;
  });
}
