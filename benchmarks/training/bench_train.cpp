// strata-bench-train: training throughput of the workloads (docs/benchmarks.md)
// (W1 tutorial, W2 Fashion-MNIST-shaped MLP, W3 wide MLP) for each strategy and
// rank count, with the sgemm rate of the same GEMM shapes measured in the same
// run. Under mpirun the "mpi" configuration runs (one rank per process).
//
//   strata-bench-train                       local 1x1, local 1x2, dp threads 2x1
//   mpirun -np 2 strata-bench-train          dp mpi 2x1 (and --configs to choose)
//
// Each configuration: warm-up steps, then --reps repetitions of --steps steps;
// samples/s median [min-max]. GFLOP/s counts the GEMM multiply-adds a step
// performs (step_flops: forward, weight gradient, and input gradient for all
// but the first layer, whose input gradient is never computed; 2 per
// multiply-add). "of sgemm" divides it by the rate of the same GEMMs on the
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
#include "data/dataset.hpp"
#include "layers/mlp.hpp"
#include "strategies/data_parallel.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

namespace strata::bench {
namespace {

struct Workload {
  std::string name;
  std::vector<std::size_t> widths;
  LossKind loss;
  std::size_t batch;
  std::size_t steps;  // per repetition
};

std::vector<Workload> workloads() {
  return {{"W1", {10, 5, 2}, LossKind::mse, 32, 2000},
          {"W2", {784, 1024, 1024, 10}, LossKind::cross_entropy, 256, 20},
          {"W3", {4096, 4096, 4096, 4096, 4096, 10}, LossKind::cross_entropy, 512, 2}};
}

std::size_t weights(const Workload& w) {
  std::size_t n = 0;
  for (std::size_t i = 0; i + 1 < w.widths.size(); ++i) n += w.widths[i] * w.widths[i + 1];
  return n;
}

// GEMM floating-point operations of one training step per sample: forward
// (2 per weight), weight gradient (2) and input gradient (2) except for the
// first layer, whose input gradient no one needs. (6 x weights, as often
// quoted, overcounts by the first layer's 2 x weights: 17% for W2.)
double step_flops(const Workload& w) {
  double f = 0;
  for (std::size_t i = 0; i + 1 < w.widths.size(); ++i)
    f += 2.0 * static_cast<double>(w.widths[i] * w.widths[i + 1]) * (i > 0 ? 3 : 2);
  return f;
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
  auto model = make_mlp<float>({w.widths});
  model.build(std::max<std::size_t>(1, shard.second));
  model.init(Init::kaiming_uniform, 1);
  auto loss = make_loss<float>(w.loss);
  Optimizer<float> opt({OptimizerKind::sgd, 0.01}, model.num_params());
  DataParallelOptions o;
  o.overlap = overlap;
  o.bucket_bytes = static_cast<std::size_t>(bucket_mb * (1 << 20));
  DataParallel<float> dp(ctx, comm, model, *loss, opt, o);
  // Synthetic data drawn once (seeded normal inputs, uniform labels).
  const auto task = w.loss == LossKind::cross_entropy ? data::CsvTask::classification
                                                      : data::CsvTask::regression;
  auto d = data::make_synthetic(w.batch, w.widths.front(), task, w.widths.back(), 3);
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

// The step's GEMMs (forward, weight gradient, input gradient except the first
// layer) with the vendor BLAS, GFLOP/s on the calling rank's threads. The
// matrices are allocated (and first touched) before timing; each repetition
// repeats the step's GEMMs for at least 20 ms so that tiny shapes (W1) are
// timed above the clock's resolution. Median of 5 repetitions.
double sgemm_rate(const Workload& w, Context& ctx) {
  struct Layer {
    MatrixBuffer<float> x, W, y, dW, dx;
  };
  std::vector<Layer> layers;
  const double flops = step_flops(w) * static_cast<double>(w.batch);
  for (std::size_t i = 0; i + 1 < w.widths.size(); ++i) {
    const std::size_t b = w.batch, in = w.widths[i], out = w.widths[i + 1];
    layers.push_back({MatrixBuffer<float>("x", b, in), MatrixBuffer<float>("w", out, in),
                      MatrixBuffer<float>("y", b, out), MatrixBuffer<float>("dw", out, in),
                      MatrixBuffer<float>("dx", b, in)});
  }
  // The BLAS itself, also at shapes Strata runs as plain loops.
  Blas blas(ctx.blas.backend(), ctx.exec);
  blas.set_inline_small(false);
  auto step_gemms = [&] {
    for (std::size_t i = 0; i < layers.size(); ++i) {
      const Layer& l = layers[i];
      blas.gemm<float>(Op::N, Op::T, 1.0f, l.x, l.W, 0.0f, l.y);
      blas.gemm<float>(Op::T, Op::N, 1.0f, l.y, l.x, 1.0f, l.dW);
      if (i > 0) blas.gemm<float>(Op::N, Op::N, 1.0f, l.y, l.W, 0.0f, l.dx);
    }
  };
  step_gemms();  // warm-up (first use of the BLAS threads)
  ctx.exec.fence();
  auto t0 = Clock::now();
  step_gemms();
  ctx.exec.fence();
  const double once = std::max(1e-9, seconds(t0, Clock::now()));
  const int iters = static_cast<int>(std::clamp(0.02 / once, 1.0, 100000.0));
  std::vector<double> rates;
  for (int r = 0; r < 5; ++r) {
    t0 = Clock::now();
    for (int it = 0; it < iters; ++it) step_gemms();
    ctx.exec.fence();
    rates.push_back(iters * flops / seconds(t0, Clock::now()) / 1e9);
  }
  return stats(rates).median;
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
    std::string which = "W1,W2,W3", configs, json_path;
    int reps = 5, warmup = 5;
    double scale = 1.0, bucket_mb = 25;
    CLI::App cli{"Training throughput of the benchmark workloads per strategy, with the sgemm "
                 "rate of the same shapes measured in the same run.", "strata-bench-train"};
    cli.add_option("--workloads", which, "comma-separated: W1, W2, W3")->capture_default_str();
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
    {
      std::stringstream ws(which);
      const auto all = workloads();
      for (std::string name; std::getline(ws, name, ',');)
        STRATA_REQUIRE(std::any_of(all.begin(), all.end(), [&](const Workload& w) { return w.name == name; }),
                       config, "--workloads: unknown workload '", name, "' (expected W1, W2 or W3)");
    }
    std::string threads = kokkos_threads_option(mpi ? 1 : 2);
    args.kokkos.insert(args.kokkos.end() - 1, threads.data());
    int kargc = static_cast<int>(args.kokkos.size()) - 1;
    runtime = std::make_unique<Runtime>(kargc, args.kokkos.data());
    world = world_communicator();
    const bool root = world->rank() == 0;
    std::ofstream json;
    if (root && !json_path.empty()) json.open(json_path);
    if (root)
      std::printf("# strata-bench-train: %d repetitions, median [min-max] samples/s; * = max/min > 1.2\n# %s\n"
                  "# sgemm: GFLOP/s of the step's GEMMs on the same threads, before / after the runs\n"
                  "%-4s %-11s %5s %7s %28s %9s %15s %9s %7s\n",
                  reps, configuration().c_str(), "load", "config", "ranks", "threads",
                  "samples/s: median [min-max]", "GFLOP/s", "sgemm", "of sgemm", "hidden");
    for (auto w : workloads()) {
      if (which.find(w.name) == std::string::npos) continue;
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
                                 {"weights", weights(w)}, {"step_flops_per_sample", step_flops(w)},
                                 {"configuration", configuration()}}.dump()
               << "\n";
      }
    }
    world->barrier();
    world.reset();
    return app::exit_ok;
  });
}
