// strata-bench-reproducible: what --reproducible costs, in one run.
//   W2 (784-1024-1024-10, batch 256) and W3 (4096 x 4 wide MLP, batch 512)
//   with SGD, W5 (gpt-mini, batch 32) with AdamW, on 1 rank x 2 threads and
//   on 2 thread ranks x 1 thread: samples/s of the default mode and of
//   --reproducible (chunks of --chunk samples, fewer where a rank's share of
//   the batch is smaller: W5's 16),
//   the two runs interleaved repetition by repetition (both models held at
//   once), median [min-max]; the ratio is the median of the repetitions'
//   ratios. --tp-chunk S: the reproducible run sums the Linears' inner
//   dimension in exact chunks of S features too (what --tp needs). On 1 rank
//   x 2 threads also the step's GEMMs alone, on the
//   vendor BLAS and on the reproducible kernel, measured between the
//   repetitions: the GEMM's share of the cost.
#include "apps/common/app_main.hpp"
#include "apps/common/cli.hpp"
#include "backends/gemm_reproducible.hpp"
#include "backends/ranks.hpp"
#include "backends/runtime.hpp"
#include "benchmarks/common/bench_utils.hpp"
#include "benchmarks/common/workloads.hpp"
#include "benchmarks/training/layer_breakdown.hpp"
#include "data/dataset.hpp"
#include "strategies/data_parallel.hpp"
#include "strategies/reproducible.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <numeric>
#include <sstream>
#include <utility>

namespace strata::bench {
namespace {

// One mode's model and strategy on a rank.
struct Trainer {
  explicit Trainer(Sequential<float> m) : model(std::move(m)) {}
  Sequential<float> model;
  std::unique_ptr<Loss<float>> loss;
  std::unique_ptr<Optimizer<float>> opt;
  std::unique_ptr<DataParallel<float>> dp;
  std::size_t chunk = 0;  // 0: the default mode
};

std::unique_ptr<Trainer> make_trainer(const Workload& w, Context& ctx, comm::Communicator& comm,
                                      std::size_t chunk, std::size_t tp_chunk = 0) {
  auto t = std::make_unique<Trainer>(make_model(w));
  t->loss = make_loss<float>(w.loss);
  const auto shard = data::BatchLoader<float>::shard(w.batch, comm.rank(), comm.size());
  if (chunk > 0) validate_reproducible(chunk, w.batch, comm.size());
  BuildOptions b;
  b.max_batch = std::max<std::size_t>(1, shard.second);
  b.numerics.exact_chunk = chunk;
  b.numerics.inner_chunk = tp_chunk;
  t->model.build(b);
  t->model.init(Init::kaiming_uniform, 1);
  t->chunk = chunk;
  t->opt = std::make_unique<Optimizer<float>>(OptimizerConfig{w.optimizer, w.lr()},
                                              t->model.num_params());
  t->dp = std::make_unique<DataParallel<float>>(ctx, comm, t->model, *t->loss, *t->opt);
  return t;
}

// The context's arithmetic for a mode.
void set_mode(Context& ctx, bool reproducible) {
  ctx.reproducible = reproducible;
  ctx.blas.set_reproducible(reproducible);
}

struct Result {
  Stats base, repro, ratio, gemm_vendor, gemm_repro;  // samples/s; ratio repro/base; GFLOP/s
};

Result run_rank(const Workload& w, Context& ctx, comm::Communicator& comm, std::size_t chunk,
                std::size_t tp_chunk, int reps, int warmup, bool gemms) {
  auto d = make_data(w, make_model(w), w.batch);
  data::BatchLoader<float> loader(d, w.batch, false, 0, false, comm.rank(), comm.size());
  data::Batch<float> b;
  loader.next(b);
  auto base = make_trainer(w, ctx, comm, 0);
  auto repro = make_trainer(w, ctx, comm, chunk, tp_chunk);
  const auto shapes = step_gemms(base->model, w.batch);
  auto timed = [&](Trainer& t, std::size_t steps) {
    set_mode(ctx, t.chunk > 0);
    comm.barrier();
    const auto t0 = Clock::now();
    for (std::size_t s = 0; s < steps; ++s) t.dp->step(b, w.batch);
    comm.barrier();
    return w.batch * steps / seconds(t0, Clock::now());
  };
  timed(*base, static_cast<std::size_t>(warmup));
  timed(*repro, static_cast<std::size_t>(warmup));
  std::vector<double> rb, rr, ratio, gv, gr;
  for (int r = 0; r < reps; ++r) {
    rb.push_back(timed(*base, w.steps));
    rr.push_back(timed(*repro, w.steps));
    ratio.push_back(rr.back() / rb.back());
    if (gemms) {
      set_mode(ctx, false);
      gv.push_back(gemm_rate(shapes, ctx, 3));
      set_mode(ctx, true);
      gr.push_back(gemm_rate(shapes, ctx, 3));
    }
  }
  set_mode(ctx, false);
  Result res{stats(rb), stats(rr), stats(ratio), {}, {}};
  if (gemms) res.gemm_vendor = stats(gv), res.gemm_repro = stats(gr);
  return res;
}

std::string ratio_text(const Stats& s) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f [%.2f-%.2f]", s.median, s.min, s.max);
  return buf;
}

}  // namespace
}  // namespace strata::bench

int main(int argc, char** argv) {
  using namespace strata;
  using namespace strata::bench;
  std::unique_ptr<Runtime> runtime;
  return app::guarded("strata-bench-reproducible", [&] {
    auto args = app::split_kokkos_args(argc, argv);
    std::string which = "W2,W3,W5";
    int reps = 5, warmup = 2;
    std::size_t chunk = default_chunk, tp_chunk = 0;
    double scale = 1.0;
    CLI::App cli{"What --reproducible costs: samples/s of the default mode and of --reproducible, "
                 "interleaved, on W2, W3 and W5, 1 rank x 2 threads and 2 thread ranks x 1 thread.",
                 "strata-bench-reproducible"};
    cli.add_option("--workloads", which, "comma-separated: W2, W3, W5")->capture_default_str();
    cli.add_option("--chunk", chunk,
                   "samples per chunk of --reproducible (at most a rank's share of the batch on "
                   "2 ranks: W5's 16)")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    cli.add_option("--tp-chunk", tp_chunk,
                   "features per exact chunk of the Linears' inner sums (--tp-chunk); 0: off")
        ->capture_default_str();
    cli.add_option("--reps", reps, "repetitions")->capture_default_str()->check(CLI::Range(1, 100));
    cli.add_option("--warmup", warmup, "warm-up steps")->capture_default_str();
    cli.add_option("--scale", scale, "multiply the steps per repetition (e.g. 0.05 for a smoke test)")
        ->capture_default_str();
    if (!app::parse_cli(cli, args.program)) return app::exit_ok;
    const std::vector<Workload> chosen = select_workloads(which, "--workloads", {"W2", "W3", "W5"});
    std::string threads = kokkos_threads_option(2);
    args.kokkos.insert(args.kokkos.end() - 1, threads.data());
    int kargc = static_cast<int>(args.kokkos.size()) - 1;
    runtime = std::make_unique<Runtime>(kargc, args.kokkos.data());
    std::printf("# strata-bench-reproducible: %d repetitions, median [min-max]; * = max/min > 1.2\n# %s\n",
                reps, configuration().c_str());
    std::printf("# W2, W3: SGD; W5: AdamW; --reproducible with chunks of %zu samples%s; GEMM kernel: %s\n",
                chunk, tp_chunk > 0 ? (", --tp-chunk " + std::to_string(tp_chunk)).c_str() : "",
                gemm_reproducible_kernel());
    std::printf("%-4s %-9s %5s %28s %28s %18s\n", "load", "ranks", "chunk", "default samples/s",
                "reproducible samples/s", "ratio");
    for (auto w : chosen) {
      w.steps = std::max<std::size_t>(1, static_cast<std::size_t>(w.steps * scale));
      // The chunk every layout below allows: it divides a rank's share on 2 ranks.
      const std::size_t c = std::gcd(chunk, w.batch / 2);
      Result gemm;
      const std::pair<int, int> layouts[] = {{1, 2}, {2, 1}};  // ranks x threads per rank
      for (const auto& layout_shape : layouts) {
        const int ranks = layout_shape.first, per = layout_shape.second;
        Result r;
        run_ranks(ranks, per, [&](Context& ctx, comm::Communicator& comm) {
          auto mine = run_rank(w, ctx, comm, c, tp_chunk, reps, warmup, ranks == 1);
          if (comm.rank() == 0) r = mine;
        });
        if (ranks == 1) gemm = r;
        const std::string layout = std::to_string(ranks) + "x" + std::to_string(per);
        std::printf("%-4s %-9s %5zu %28s %28s %18s\n", w.name.c_str(), layout.c_str(), c,
                    rate_text(r.base).c_str(), rate_text(r.repro).c_str(), ratio_text(r.ratio).c_str());
        std::fflush(stdout);
      }
      std::printf("%-4s %-9s %5s GEMMs of a step, GFLOP/s: vendor %s, reproducible %s\n", w.name.c_str(),
                  "1x2", "", rate_text(gemm.gemm_vendor).c_str(), rate_text(gemm.gemm_repro).c_str());
    }
    return app::exit_ok;
  });
}
