// strata-bench-mixed: mixed precision in one run.
//   1. Training throughput and memory per rank of fp32 vs 16-bit precision on
//      W2 (784-1024-1024-10, batch 256) and W3 (4096 x 4 wide MLP, batch 512),
//      one rank x 2 threads, SGD. Memory: bytes allocated (parameters,
//      gradients, optimizer state, fp32 master weights, activations) and the
//      bytes the same run needs with real 16-bit storage of activations and
//      working weights (computed: Strata emulates 16-bit storage in float
//      buffers; see docs/mixed-precision.md).
//   2. Gradient allreduce payload per step and rank, and step time, on 2
//      thread ranks x 1 thread, without and with 16-bit compression.
// Each: warm-up steps, then --reps repetitions of the workload's steps;
// median [min-max] samples/s.
#include "apps/common/app_main.hpp"
#include "apps/common/cli.hpp"
#include "backends/ranks.hpp"
#include "backends/runtime.hpp"
#include "benchmarks/common/bench_utils.hpp"
#include "data/dataset.hpp"
#include "layers/mlp.hpp"
#include "strategies/data_parallel.hpp"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <sstream>

namespace strata::bench {
namespace {

struct Workload {
  std::string name;
  std::vector<std::size_t> widths;
  std::size_t batch;
  std::size_t steps;  // per repetition
};

std::vector<Workload> workloads() {
  return {{"W2", {784, 1024, 1024, 10}, 256, 20},
          {"W3", {4096, 4096, 4096, 4096, 4096, 10}, 512, 2}};
}

struct Run {
  Stats samples_per_s;
  double allocated = 0, real16 = 0;  // bytes per rank
  double comm_bytes = 0;             // allreduce payload per step and rank
  double exposed_ms = 0;             // communication waited for after backward, per step
  double loss = 0;                   // last loss (sanity)
};

Run run_rank(const Workload& w, Context& ctx, comm::Communicator& comm, Precision precision,
             GradCompression compression, int reps, int warmup) {
  const auto shard = data::BatchLoader<float>::shard(w.batch, comm.rank(), comm.size());
  auto model = make_mlp<float>({w.widths});
  const std::size_t rows = std::max<std::size_t>(1, shard.second);
  model.build(rows);
  model.init(Init::kaiming_uniform, 1);
  SoftmaxCrossEntropy<float> loss;
  const OptimizerConfig oc{OptimizerKind::sgd, 0.01};
  Optimizer<float> opt(oc, model.num_params());
  DataParallelOptions o;
  o.precision = precision;
  o.compression = compression;
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
  const double state = static_cast<double>(state_elements(oc, model.num_params())) * 4;
  const double acts = static_cast<double>(model.activation_bytes(rows, 1));
  const bool mixed = precision != Precision::fp32;
  // Allocated: params (working weights) + grads + state + master + activations.
  run.allocated = 4 * n + 4 * n + state + (mixed ? 4 * n : 0) + acts;
  // Real 16-bit storage: 16-bit working weights and activations, the rest fp32.
  run.real16 = mixed ? 2 * n + 4 * n + state + 4 * n + acts / 2 : run.allocated;
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
    std::string which = "W2,W3", precisions = "fp32,bf16", compressions = "none,bf16";
    int reps = 3, warmup = 2;
    double scale = 1.0;
    CLI::App cli{"Mixed precision: samples/s and memory of fp32 vs 16-bit training, and "
                 "gradient allreduce bytes with and without compression.", "strata-bench-mixed"};
    cli.add_option("--workloads", which, "comma-separated: W2, W3")->capture_default_str();
    cli.add_option("--precisions", precisions, "comma-separated: fp32, bf16, fp16")->capture_default_str();
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
    std::vector<Precision> ps;
    for (const auto& p : list(precisions)) ps.push_back(parse_precision(p));
    std::vector<GradCompression> cs;
    for (const auto& c : list(compressions)) cs.push_back(parse_grad_compression(c));
    for (const auto& w : list(which))
      STRATA_REQUIRE(w == "W2" || w == "W3", config, "--workloads: unknown workload '", w,
                     "' (expected W2 or W3)");
    std::string threads = kokkos_threads_option(2);
    args.kokkos.insert(args.kokkos.end() - 1, threads.data());
    int kargc = static_cast<int>(args.kokkos.size()) - 1;
    runtime = std::make_unique<Runtime>(kargc, args.kokkos.data());
    std::printf("# strata-bench-mixed: %d repetitions, median [min-max] samples/s; * = max/min > 1.2\n# %s\n",
                reps, configuration().c_str());
    std::printf("# 1 rank x 2 threads, SGD; 16-bit storage is emulated in float buffers: 'allocated' is\n"
                "# what this run holds, 'real 16-bit' what 16-bit activations and working weights need\n");
    std::printf("%-4s %-9s %28s %14s %14s\n", "load", "precision", "samples/s: median [min-max]",
                "allocated", "real 16-bit");
    for (auto w : workloads()) {
      if (which.find(w.name) == std::string::npos) continue;
      w.steps = std::max<std::size_t>(1, static_cast<std::size_t>(w.steps * scale));
      for (Precision p : ps) {
        Run r;
        run_ranks(1, 2, [&](Context& ctx, comm::Communicator& comm) {
          r = run_rank(w, ctx, comm, p, GradCompression::none, reps, warmup);
        });
        std::printf("%-4s %-9s %28s %14s %14s\n", w.name.c_str(), to_string(p),
                    rate_text(r.samples_per_s).c_str(), format_bytes(r.allocated).c_str(),
                    format_bytes(r.real16).c_str());
        std::fflush(stdout);
      }
    }
    std::printf("# gradient allreduce, 2 thread ranks x 1 thread: payload per step and rank\n");
    std::printf("%-4s %-11s %14s %28s %12s\n", "load", "compression", "bytes/step",
                "samples/s: median [min-max]", "exposed ms");
    for (auto w : workloads()) {
      if (which.find(w.name) == std::string::npos) continue;
      w.steps = std::max<std::size_t>(1, static_cast<std::size_t>(w.steps * scale));
      for (GradCompression c : cs) {
        Run r;
        run_ranks(2, 1, [&](Context& ctx, comm::Communicator& comm) {
          auto mine = run_rank(w, ctx, comm, Precision::fp32, c, reps, warmup);
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
