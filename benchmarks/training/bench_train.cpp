// strata-bench-train: training throughput of the workloads (docs/benchmarks.md)
// (W1 tutorial, W2 Fashion-MNIST-shaped MLP, W3 wide MLP, W4 the CNN of
// models/cnn-fashion.toml, W5 the transformer of models/gpt-mini.toml with
// AdamW on token windows: samples/s x 128 = tokens/s) for each strategy and rank count, with the sgemm
// rate of the same GEMM shapes measured in the same run. Under mpirun the
// "mpi" configuration runs (one rank per process). --breakdown adds a table
// per layer (benchmarks/training/layer_breakdown.hpp).
//
//   strata-bench-train                       local 1x1, local 1x2, dp threads 2x1
//   mpirun -np 2 strata-bench-train          dp mpi 2x1 (and --configs to choose)
//
// Each configuration: warm-up steps, then --reps repetitions of --steps steps;
// samples/s median [min-max]. GFLOP/s counts the GEMM multiply-adds a step
// performs (step_gemms: forward, weight gradient, and input gradient for all
// but the first GEMM layer, whose input gradient is never computed; 2 per
// multiply-add; a convolution's as the GEMMs of its unfolded patches). "of sgemm" divides it by the rate of the same GEMMs on the
// same threads, measured just before and just after the configuration's
// repetitions (both printed; the ratio uses their mean), so that both sides
// are taken under the same conditions and a figure above 100% means a
// measurement went wrong. For
// data parallelism, "hidden" is the fraction of gradient communication time
// that overlapped backward (1 - exposed with overlap / exposed without).
#include "apps/common/app_main.hpp"
#include "apps/common/cli.hpp"
#include "backends/ranks.hpp"
#include "backends/runtime.hpp"
#include "benchmarks/common/bench_utils.hpp"
#include "benchmarks/common/workloads.hpp"
#include "benchmarks/training/layer_breakdown.hpp"
#include "data/dataset.hpp"
#include "layers/mlp.hpp"
#include "layers/registry.hpp"
#include "strategies/data_parallel.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

namespace strata::bench {
namespace {

// GEMM floating-point operations of one training step per sample
// (layer_breakdown.hpp's step_gemms: layer 0's input gradient
// is not computed; 6 x weights, as often quoted for an MLP, overcounts by the
// first layer's 2 x weights: 17% for W2).
double step_flops(const Workload& w) {
  double f = 0;
  for (const auto& g : step_gemms(make_model(w), w.batch)) f += g.flops();
  return f / static_cast<double>(w.batch);
}

struct Config {
  std::string name;  // local | dp-threads | dp-mpi
  int ranks, threads;
};

struct Result {
  Stats samples_per_s;
  std::vector<double> rates;  // samples/s of each repetition
  double hidden = -1;  // fraction of communication hidden (dp only)
};

// Times training of `w` on one rank of `comm` (all ranks call it).
Result run_rank(const Workload& w, Context& ctx, comm::Communicator& comm, int reps, int warmup,
                bool overlap, double bucket_mb) {
  const auto shard = data::BatchLoader<float>::shard(w.batch, comm.rank(), comm.size());
  auto model = make_model(w);
  model.build(std::max<std::size_t>(1, shard.second));
  model.init(Init::kaiming_uniform, 1);
  auto loss = make_loss<float>(w.loss);
  OptimizerConfig oc;
  oc.kind = w.optimizer;
  oc.lr = w.optimizer == OptimizerKind::sgd ? 0.01 : 0.001;
  Optimizer<float> opt(oc, model.num_params());
  DataParallelOptions o;
  o.overlap = overlap;
  o.bucket_bytes = static_cast<std::size_t>(bucket_mb * (1 << 20));
  DataParallel<float> dp(ctx, comm, model, *loss, opt, o);
  // Synthetic data drawn once (benchmarks/common/workloads.hpp).
  auto d = make_data(w, model, w.batch);
  data::BatchLoader<float> loader(d, w.batch, false, 0, false, comm.rank(), comm.size());
  data::Batch<float> b;
  loader.next(b);
  for (int i = 0; i < warmup; ++i) dp.step(b, w.batch);
  std::vector<double> rates;
  double exposed = 0;
  for (int r = 0; r < reps; ++r) {
    comm.barrier();
    const auto t0 = Clock::now();
    for (std::size_t s = 0; s < w.steps; ++s) {
      dp.step(b, w.batch);
      exposed += dp.last_timing().exposed_comm_s;
    }
    comm.barrier();
    rates.push_back(w.batch * w.steps / seconds(t0, Clock::now()));
  }
  Result res;
  res.samples_per_s = stats(rates);
  res.rates = rates;
  res.hidden = exposed / (reps * w.steps);  // exposed seconds per step (converted by caller)
  return res;
}

// The step's GEMMs (step_gemms) with the vendor BLAS, GFLOP/s on the calling
// rank's threads (layer_breakdown.hpp's gemm_rate: matrices allocated and
// touched first, each repetition at least 20 ms, median of 5).
double sgemm_rate(const Workload& w, Context& ctx) {
  return gemm_rate(step_gemms(make_model(w), w.batch), ctx);
}


// --guard: the GEMM parts of each workload's Linear and Conv2d layers against
// the sgemm rate of their shapes, measured in the same run (ratios, not
// times: a busy machine slows both). A part fails when it is below `floor`
// in each of 3 tries, so that noise does not fail CI and a regression does.
int gemm_guard(const std::vector<Workload>& chosen, double floor, int reps) {
  struct Seen {
    double best = 0;
    std::string what;
    bool checked = false;
  };
  std::map<std::string, Seen> seen;  // workload/threads/layer/part -> best fraction over tries
  constexpr int tries = 3;
  // Smaller parts (W2's 10-wide head: 5 MFLOP, 0.07 ms) are timing noise, not
  // rates; the input gradient is even a difference of two timings.
  constexpr double min_flops = 20e6;
  for (int attempt = 1; attempt <= tries; ++attempt) {
    int below = 0;
    for (const auto& w : chosen)
      for (int t : {1, 2})
        run_ranks(1, t, [&](Context& ctx, comm::Communicator&) {
          auto model = make_model(w);
          model.build(w.batch);
          model.init(Init::kaiming_uniform, 1);
          std::vector<GemmPart> parts;
          layer_breakdown(model, w.batch, ctx, reps, w.name, &parts);
          for (const GemmPart& g : parts) {
            if (g.alternative || g.flops < min_flops) continue;
            const std::string key = w.name + " " + std::to_string(t) + " thread(s) " + g.layer + " " + g.part;
            Seen& s = seen[key];
            s.best = std::max(s.best, g.fraction);
            s.what = g.type;
            s.checked = g.type.rfind("Linear", 0) == 0 || g.type.rfind("Conv2d", 0) == 0;
          }
        });
    for (const auto& [key, s] : seen) below += s.checked && s.best < floor;
    if (below == 0) break;
    if (attempt < tries)
      std::printf("# guard: %d part(s) below %.0f%% after try %d; measuring again\n", below,
                  100 * floor, attempt);
  }
  int failed = 0, checked = 0;
  std::printf("# guard: the best of up to %d tries per GEMM part, against the sgemm rate of its shapes\n", tries);
  for (const auto& [key, s] : seen) {
    const bool bad = s.checked && s.best < floor;
    checked += s.checked;
    failed += bad;
    std::printf("guard: %-42s %-34s %4.0f%% %s\n", key.c_str(), s.what.substr(0, 34).c_str(),
                100 * s.best, !s.checked ? "(not checked)" : bad ? "BELOW" : "ok");
  }
  if (failed > 0) {
    std::printf("guard: FAILED: %d of %d Linear and Conv2d GEMM parts below %.0f%% of the sgemm "
                "rate of their shapes in each of %d tries\n", failed, checked, 100 * floor, tries);
    return 1;
  }
  std::printf("guard: ok: %d Linear and Conv2d GEMM parts at or above %.0f%% of the sgemm rate "
              "of their shapes\n", checked, 100 * floor);
  return 0;
}

}  // namespace
}  // namespace strata::bench

int main(int argc, char** argv) {
  using namespace strata;
  using namespace strata::bench;
  std::unique_ptr<Runtime> runtime;
  std::unique_ptr<comm::Communicator> world;
  return app::guarded("strata-bench-train", [&] {
    auto args = app::split_kokkos_args(argc, argv);
    std::string which = "W1,W2,W3,W4,W5", configs, json_path, print_workload;
    bool breakdown = false;
    double guard = 0;
    int reps = 5, warmup = 5;
    double scale = 1.0, bucket_mb = 25;
    CLI::App cli{"Training throughput of the benchmark workloads per strategy, with the sgemm "
                 "rate of the same shapes measured in the same run.", "strata-bench-train"};
    cli.add_option("--workloads", which, "comma-separated: W1, W2, W3, W4, W5")->capture_default_str();
    cli.add_option("--print-workload", print_workload,
                   "print strata-train's options for workload W (model, loss, batch, optimizer) "
                   "and exit; the scripts that train the workloads ask for them here");
    cli.add_flag("--breakdown", breakdown,
                 "after each workload, a table per layer (forward, backward-data, backward-weights; "
                 "GEMM layers against the rate of their GEMM shapes) on 1 and 2 threads");
    cli.add_option("--guard", guard,
                   "a check for CI, in seconds: the per-layer tables of the workloads on 1 and 2 "
                   "threads (no throughput runs); exit code 1 when a Linear or Conv2d GEMM part "
                   "of 20 MFLOP or more runs below this fraction of the sgemm rate of its shapes in "
                   "each of 3 tries (attention: printed, not checked)")
        ->check(CLI::Range(0.0, 1.0));
    cli.add_option("--configs", configs,
                   "comma-separated: local-1x1, local-1x2, dp-threads-2x1, dp-mpi (default: "
                   "the first three; dp-mpi under mpirun)");
    cli.add_option("--reps", reps, "repetitions")->capture_default_str()->check(CLI::Range(1, 100));
    cli.add_option("--warmup", warmup, "warm-up steps")->capture_default_str();
    cli.add_option("--scale", scale, "multiply the steps per repetition (e.g. 0.01 for a smoke test)")
        ->capture_default_str();
    cli.add_option("--json", json_path, "also write the results as JSON lines");
    cli.add_option("--bucket-mb", bucket_mb, "data parallel: gradient bucket size in MiB")
        ->capture_default_str();
    if (!app::parse_cli(cli, args.program)) return app::exit_ok;
    const bool mpi = launched_by_mpi();
    if (configs.empty()) configs = mpi ? "dp-mpi" : "local-1x1,local-1x2,dp-threads-2x1";
    std::vector<Config> cs;
    std::stringstream ss(configs);
    for (std::string c; std::getline(ss, c, ',');) {
      if (c == "local-1x1") cs.push_back({"local", 1, 1});
      else if (c == "local-1x2") cs.push_back({"local", 1, 2});
      else if (c == "dp-threads-2x1") cs.push_back({"dp-threads", 2, 1});
      else if (c == "dp-mpi") cs.push_back({"dp-mpi", 0, 1});
      else
        STRATA_THROW(config, "--configs: unknown configuration '", c,
                     "' (expected local-1x1, local-1x2, dp-threads-2x1 or dp-mpi)");
    }
    const std::vector<Workload> chosen = select_workloads(which, "--workloads");
    if (!print_workload.empty()) {
      std::printf("%s\n", select_workloads(print_workload, "--print-workload").front().train_args().c_str());
      return app::exit_ok;
    }
    std::string threads = kokkos_threads_option(mpi ? 1 : 2);
    args.kokkos.insert(args.kokkos.end() - 1, threads.data());
    int kargc = static_cast<int>(args.kokkos.size()) - 1;
    runtime = std::make_unique<Runtime>(kargc, args.kokkos.data());
    world = world_communicator();
    if (guard > 0) return gemm_guard(chosen, guard, reps);
    const bool root = world->rank() == 0;
    std::ofstream json;
    if (root && !json_path.empty()) json.open(json_path);
    if (root)
      std::printf("# strata-bench-train: %d repetitions, median [min-max] samples/s; * = max/min > 1.2\n# %s\n"
                  "# sgemm: GFLOP/s of the step's GEMMs on the same threads, before / after the runs\n"
                  "%-4s %-11s %5s %7s %28s %9s %15s %9s %7s\n",
                  reps, configuration().c_str(), "load", "config", "ranks", "threads",
                  "samples/s: median [min-max]", "GFLOP/s", "sgemm", "of sgemm", "hidden");
    for (auto w : chosen) {
      w.steps = std::max<std::size_t>(1, static_cast<std::size_t>(w.steps * scale));
      for (const auto& c : cs) {
        if ((c.name == "dp-mpi") != (world->size() > 1 || mpi)) continue;
        Result res, no_overlap;
        double sgemm_before = 0, sgemm_after = 0;
        int ranks = c.ranks, threads_per_rank = c.threads;
        if (c.name == "dp-mpi") {
          Context ctx;
          ranks = world->size();
          // Every process runs the same GEMMs at once, as in training.
          sgemm_before = sgemm_rate(w, ctx) * ranks;
          res = run_rank(w, ctx, *world, reps, warmup, true, bucket_mb);
          sgemm_after = sgemm_rate(w, ctx) * ranks;
          no_overlap = run_rank(w, ctx, *world, reps, 1, false, bucket_mb);
        } else {
          // sgemm on one rank's threads (all ranks run the same shapes at
          // once in dp; their share of the machine is what one rank gets).
          auto reference = [&] {
            double r = 0;
            run_ranks(1, c.threads, [&](Context& ctx, comm::Communicator&) { r = sgemm_rate(w, ctx); });
            return r * c.ranks;
          };
          sgemm_before = reference();
          run_ranks(c.ranks, c.threads, [&](Context& ctx, comm::Communicator& comm) {
            auto r = run_rank(w, ctx, comm, reps, warmup, true, bucket_mb);
            if (comm.rank() == 0) res = r;
          });
          sgemm_after = reference();
          if (c.ranks > 1)
            run_ranks(c.ranks, c.threads, [&](Context& ctx, comm::Communicator& comm) {
              auto n = run_rank(w, ctx, comm, reps, 1, false, bucket_mb);
              if (comm.rank() == 0) no_overlap = n;
            });
        }
        const double sgemm = (sgemm_before + sgemm_after) / 2;
        if (!root) continue;
        const double gflops = res.samples_per_s.median * step_flops(w) / 1e9;
        char hidden[16] = "-";
        if (ranks > 1 && no_overlap.hidden > 0)
          std::snprintf(hidden, sizeof hidden, "%.0f%%", 100 * std::max(0.0, 1 - res.hidden / no_overlap.hidden));
        char rate[64];
        std::snprintf(rate, sizeof rate, "%.0f [%.0f-%.0f]%s", res.samples_per_s.median,
                      res.samples_per_s.min, res.samples_per_s.max, res.samples_per_s.noisy() ? " *" : "");
        char reference[32];
        std::snprintf(reference, sizeof reference, "%.1f / %.1f", sgemm_before, sgemm_after);
        std::printf("%-4s %-11s %5d %7d %28s %9.1f %15s %8.0f%% %7s\n", w.name.c_str(), c.name.c_str(),
                    ranks, threads_per_rank, rate, gflops, reference, 100 * gflops / sgemm, hidden);
        std::fflush(stdout);
        if (json.is_open())
          json << nlohmann::json{{"workload", w.name}, {"config", c.name}, {"ranks", ranks},
                                 {"threads", threads_per_rank},
                                 {"samples_per_sec", res.samples_per_s.median},
                                 {"min", res.samples_per_s.min}, {"max", res.samples_per_s.max},
                                 {"gflops", gflops}, {"sgemm_gflops", sgemm},
                                 {"sgemm_gflops_before", sgemm_before},
                                 {"sgemm_gflops_after", sgemm_after}, {"rates", res.rates},
                                 {"reps", reps}, {"warmup", warmup}, {"steps", w.steps},
                                 {"batch", w.batch}, {"widths", w.widths}, {"loss", to_string(w.loss)},
                                 {"optimizer", to_string(w.optimizer)},
                                 {"lr", w.optimizer == OptimizerKind::sgd ? 0.01 : 0.001},
                                 {"model", w.model.empty() ? nlohmann::json() : nlohmann::json(model_path(w.model))},
                                 {"input", make_model(w).shape(0).dims()},
                                 {"parameters", make_model(w).num_params()}, {"step_flops_per_sample", step_flops(w)},
                                 {"configuration", configuration()}}.dump()
               << "\n";
      }
    }
    // Per layer, on one rank of 1 and of 2 threads (not under mpirun).
    if (breakdown && world->size() == 1 && !mpi)
      for (const auto& w : chosen) {
        for (int t : {1, 2})
          run_ranks(1, t, [&](Context& ctx, comm::Communicator&) {
            auto model = make_model(w);
            model.build(w.batch);
            model.init(Init::kaiming_uniform, 1);
            layer_breakdown(model, w.batch, ctx, reps, w.name);
          });
      }
    world->barrier();
    world.reset();
    return app::exit_ok;
  });
}
