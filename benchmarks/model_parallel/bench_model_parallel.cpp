// strata-bench-model-parallel: the pipeline bubble and the throughput and
// memory of every model-parallel strategy, on thread ranks, in one run.
//
// Bubble: a deep MLP of equal layers (--bubble-widths) cut into S stages,
// trained with M micro-batches under GPipe and 1F1B. Per stage, the measured
// idle fraction is the time spent waiting for the neighbouring stages
// divided by the step time (median over repetitions); the theoretical bubble
// of equal stages with free communication is (S - 1) / (M + S - 1).
//
// Strategies: the W2 MLP (784-1024-1024-10, batch 256, Adam) on 2 and 4
// ranks as data parallel, data parallel with ZeRO-1, pipeline, tensor
// parallel and (4 ranks) hybrid meshes: samples/s median [min-max] and the
// bytes per rank (parameters + gradients + optimizer state + activations).
//
// Thread ranks share the machine's cores: with more ranks than cores the
// figures measure oversubscription, and the program says so.
#include "apps/common/app_main.hpp"
#include "apps/common/cli.hpp"
#include "backends/ranks.hpp"
#include "backends/runtime.hpp"
#include "benchmarks/common/bench_utils.hpp"
#include "data/dataset.hpp"
#include "strategies/model_parallel.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <mutex>
#include <thread>

namespace strata::bench {
namespace {

struct Run {
  std::vector<std::size_t> widths;
  std::size_t batch;
  ModelParallelOptions options;
  int ranks;
  std::size_t steps;
  int reps, warmup;
};

struct Measured {
  Stats samples_per_s;
  std::vector<double> idle;  // per stage: median idle fraction
  MemoryReport memory;       // world rank 0
  std::size_t max_total = 0;  // largest total bytes over ranks
};

Measured measure(const Run& run) {
  Measured out;
  out.idle.assign(run.options.mesh.pp, 0.0);
  std::mutex mutex;
  run_ranks(run.ranks, 1, [&](Context& ctx, comm::Communicator& world) {
    ModelParallel<float> mp(ctx, world, mlp_model({run.widths}), Init::kaiming_uniform, 1,
                            LossKind::cross_entropy, {OptimizerKind::adam, 1e-3},
                            data::BatchLoader<float>::shard(run.batch, 0, run.options.mesh.dp).second,
                            run.options);
    auto d = data::make_synthetic(run.batch, run.widths.front(), data::CsvTask::classification,
                                  run.widths.back(), 3);
    data::BatchLoader<float> loader(d, run.batch, false, 0, false, mp.mesh().dp_rank(),
                                    run.options.mesh.dp);
    data::Batch<float> b;
    loader.next(b);
    for (int i = 0; i < run.warmup; ++i) mp.step(b, run.batch);
    std::vector<double> rates, idle;
    for (int r = 0; r < run.reps; ++r) {
      world.barrier();
      double wait = 0, busy = 0;
      const auto t0 = Clock::now();
      for (std::size_t s = 0; s < run.steps; ++s) {
        mp.step(b, run.batch);
        wait += mp.last_timing().pipeline_wait_s;
        busy += mp.last_timing().step_s;
      }
      world.barrier();
      rates.push_back(static_cast<double>(run.batch * run.steps) / seconds(t0, Clock::now()));
      idle.push_back(busy > 0 ? wait / busy : 0);
    }
    const auto total = static_cast<std::int64_t>(mp.memory().total());
    const auto worst = world.allreduce_value(total, comm::ReduceOp::max);
    std::lock_guard<std::mutex> lock(mutex);
    if (mp.mesh().dp_rank() == 0 && mp.mesh().tp_rank() == 0)
      out.idle[mp.mesh().pp_rank()] = stats(idle).median;
    if (world.rank() == 0) {
      out.samples_per_s = stats(rates);
      out.memory = mp.memory();
      out.max_total = static_cast<std::size_t>(worst);
    }
  });
  return out;
}

}  // namespace
}  // namespace strata::bench

int main(int argc, char** argv) {
  using namespace strata;
  using namespace strata::bench;
  std::unique_ptr<Runtime> runtime;
  return app::guarded("strata-bench-model-parallel", [&] {
    auto args = app::split_kokkos_args(argc, argv);
    int reps = 5, warmup = 2;
    double scale = 1.0;
    std::string json_path, bubble_text = "512,512,512,512,512,512,512,512,512,10";
    std::string micro_text = "1,2,4,8";
    bool skip_bubble = false, skip_strategies = false;
    CLI::App cli{"The pipeline bubble (measured against (S-1)/(M+S-1)) and the throughput and "
                 "memory per rank of every model-parallel strategy on thread ranks.",
                 "strata-bench-model-parallel"};
    cli.add_option("--reps", reps, "repetitions")->capture_default_str()->check(CLI::Range(1, 100));
    cli.add_option("--warmup", warmup, "warm-up steps")->capture_default_str();
    cli.add_option("--scale", scale, "multiply the steps per repetition (0.01: smoke test)")
        ->capture_default_str();
    cli.add_option("--bubble-widths", bubble_text, "layer widths of the bubble model")
        ->capture_default_str();
    cli.add_option("--micro-batches", micro_text, "micro-batch counts of the bubble table")
        ->capture_default_str();
    cli.add_flag("--no-bubble", skip_bubble, "skip the bubble table");
    cli.add_flag("--no-strategies", skip_strategies, "skip the strategies table");
    cli.add_option("--json", json_path, "also write the results as JSON lines");
    if (!app::parse_cli(cli, args.program)) return app::exit_ok;
    STRATA_REQUIRE(!launched_by_mpi(), config,
                   "strata-bench-model-parallel runs thread ranks in one process; launch it "
                   "without mpirun");
    const auto bubble_widths = parse_widths(bubble_text);
    std::vector<std::size_t> micros;
    for (std::size_t m : parse_widths(micro_text + ",1")) micros.push_back(m);
    micros.pop_back();
    std::string threads = kokkos_threads_option(4);
    args.kokkos.insert(args.kokkos.end() - 1, threads.data());
    int kargc = static_cast<int>(args.kokkos.size()) - 1;
    runtime = std::make_unique<Runtime>(kargc, args.kokkos.data());
    std::ofstream json;
    if (!json_path.empty()) json.open(json_path);
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    auto steps = [&](std::size_t n) { return std::max<std::size_t>(1, static_cast<std::size_t>(n * scale)); };
    std::printf("# strata-bench-model-parallel: %d repetitions, median [min-max]; * = max/min > 1.2\n"
                "# %s\n# %u cores: runs with more ranks than cores are oversubscribed\n",
                reps, configuration().c_str(), cores);

    if (!skip_bubble) {
      std::printf("\n## Pipeline bubble: model %s, batch 256, one thread per stage\n"
                  "%-7s %3s %4s %-28s %9s %9s %s\n", bubble_text.c_str(), "sched", "S", "M",
                  "samples/s: median [min-max]", "idle", "theory", "idle per stage");
      for (int S : {2, 4}) {
        for (std::size_t M : micros) {
          for (Schedule sched : {Schedule::gpipe, Schedule::one_f_one_b}) {
            Run run{bubble_widths, 256, {}, S, steps(20), reps, warmup};
            run.options.mesh = {1, S, 1};
            run.options.micro_batches = M;
            run.options.schedule = sched;
            const auto m = measure(run);
            double mean = 0;
            std::string per;
            for (double f : m.idle) {
              mean += f / S;
              char b[16];
              std::snprintf(b, sizeof b, "%s%.2f", per.empty() ? "" : " ", f);
              per += b;
            }
            const double theory = double(S - 1) / double(M + S - 1);
            std::printf("%-7s %3d %4zu %-28s %9.3f %9.3f %s%s\n", to_string(sched), S, M,
                        rate_text(m.samples_per_s).c_str(), mean, theory, per.c_str(),
                        S > int(cores) ? "  (oversubscribed)" : "");
            std::fflush(stdout);
            if (json.is_open())
              json << nlohmann::json{{"table", "bubble"}, {"schedule", to_string(sched)},
                                     {"stages", S}, {"micro_batches", M},
                                     {"samples_per_s", m.samples_per_s.median},
                                     {"samples_per_s_min", m.samples_per_s.min},
                                     {"samples_per_s_max", m.samples_per_s.max},
                                     {"idle", mean}, {"idle_per_stage", m.idle},
                                     {"theory", theory}}
                          .dump()
                   << "\n";
          }
        }
      }
    }

    if (!skip_strategies) {
      const std::vector<std::size_t> w2{784, 1024, 1024, 10};
      std::printf("\n## Strategies: W2 MLP 784-1024-1024-10, batch 256, Adam, one thread per rank\n"
                  "%-26s %5s %-28s %11s %11s %11s\n", "strategy", "ranks",
                  "samples/s: median [min-max]", "MiB/rank", "optimizer", "max MiB");
      struct S {
        const char* name;
        MeshShape mesh;
        int zero;
        std::size_t micro;
      };
      const S cases[] = {
          {"local", {1, 1, 1}, 0, 1},        {"dp", {2, 1, 1}, 0, 1},
          {"dp + zero-1", {2, 1, 1}, 1, 1},  {"pipeline 1f1b M=8", {1, 2, 1}, 0, 8},
          {"tensor", {1, 1, 2}, 0, 1},       {"dp", {4, 1, 1}, 0, 1},
          {"dp + zero-1", {4, 1, 1}, 1, 1},  {"pipeline 1f1b M=8", {1, 4, 1}, 0, 8},
          {"tensor", {1, 1, 4}, 0, 1},       {"dp2 x pp2, M=4", {2, 2, 1}, 0, 4},
          {"dp2 x tp2", {2, 1, 2}, 0, 1},    {"pp2 x tp2, M=4", {1, 2, 2}, 0, 4},
      };
      for (const auto& k : cases) {
        Run run{w2, 256, {}, k.mesh.size(), steps(10), reps, warmup};
        run.options.mesh = k.mesh;
        run.options.zero = k.zero;
        run.options.micro_batches = k.micro;
        const auto m = measure(run);
        const double mib = 1024.0 * 1024.0;
        std::printf("%-26s %5d %-28s %11.2f %11.2f %11.2f%s\n", k.name, k.mesh.size(),
                    rate_text(m.samples_per_s).c_str(), m.memory.total() / mib,
                    m.memory.optimizer / mib, m.max_total / mib,
                    k.mesh.size() > int(cores) ? "  (oversubscribed)" : "");
        std::fflush(stdout);
        if (json.is_open())
          json << nlohmann::json{{"table", "strategies"}, {"strategy", k.name},
                                 {"mesh", k.mesh.str()}, {"ranks", k.mesh.size()},
                                 {"samples_per_s", m.samples_per_s.median},
                                 {"samples_per_s_min", m.samples_per_s.min},
                                 {"samples_per_s_max", m.samples_per_s.max},
                                 {"bytes_per_rank", m.memory.total()},
                                 {"optimizer_bytes", m.memory.optimizer},
                                 {"max_bytes_per_rank", m.max_total}}
                      .dump()
               << "\n";
      }
    }
    return app::exit_ok;
  });
}
