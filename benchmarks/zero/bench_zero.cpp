// strata-bench-zero: what the ZeRO stages cost and save, on thread ranks.
//
// Memory (each stage in a process of its own, so that the operating
// system's figure is that stage's alone): a model file (default
// models/gpt-small.toml) trained for a few steps with AdamW on --dp thread
// ranks. Per rank: the engine's accounting (ModelParallel::memory, the
// prediction strata-plan makes for the same layout: both are stage_memory),
// its parameters + gradients + optimizer state + master weights and their
// ratio to ZeRO-0's, and the measured growth of the process's peak resident
// set (VmHWM after the steps minus VmRSS before the engine), divided by the
// ranks.
//
// Throughput (--throughput): the stages on --ranks thread ranks in this
// process, interleaved round by round (each round trains every stage
// --steps steps), samples/s median [min-max], and the ratios ZeRO-2 /
// ZeRO-1 and ZeRO-3 / ZeRO-0 per round.
#include "apps/common/app_main.hpp"
#include "apps/common/cli.hpp"
#include "backends/ranks.hpp"
#include "backends/runtime.hpp"
#include "benchmarks/common/bench_utils.hpp"
#include "benchmarks/common/workloads.hpp"
#include "data/loader.hpp"
#include "data/text.hpp"
#include "layers/model_spec.hpp"
#include "strategies/model_parallel.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <unistd.h>

namespace strata::bench {
namespace {

// A field of /proc/self/status in bytes ("VmRSS", "VmHWM"); 0 where absent.
std::size_t proc_status(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0) return std::stoull(line.substr(field.size() + 1)) * 1024;
  return 0;
}

struct Setup {
  std::string model_file;
  int ranks = 4;
  std::size_t batch = 8, steps = 2, bucket_bytes = std::size_t(25) << 20;
};

// The model's input length and vocabulary (its first layer's and last output's widths).
struct Tokens {
  std::size_t context, vocab;
};

Tokens tokens_of(const ModelSpec& spec) {
  const Sequential<float> m = build_model<float>(spec, 1);
  return {spec.input.numel(), m.out_features() / spec.input.numel()};
}

ModelParallelOptions zero_options(const Setup& s, int zero) {
  ModelParallelOptions o;
  o.mesh = {s.ranks, 1, 1};
  o.zero = zero;
  o.bucket_bytes = s.bucket_bytes;
  return o;
}

// One stage's memory, measured in this process (the child's mode).
nlohmann::json measure_memory(const Setup& s, int zero) {
  const ModelSpec spec = read_model_file(s.model_file);
  const Tokens t = tokens_of(spec);
  const auto data = data::make_synthetic_tokens(s.batch * 4, t.context, t.vocab, 7);
  const std::size_t before = proc_status("VmRSS");
  std::mutex mutex;
  nlohmann::json out;
  run_ranks(s.ranks, 1, [&](Context& ctx, comm::Communicator& world) {
    const ModelParallelOptions o = zero_options(s, zero);
    const std::size_t shard = data::BatchLoader<float>::shard(s.batch, 0, s.ranks).second;
    ModelParallel<float> mp(ctx, world, spec, Init::kaiming_uniform, 1, LossKind::cross_entropy,
                            {OptimizerKind::adamw, 1e-4}, shard, o);
    data::BatchLoader<float> loader(data, s.batch, false, 0, false, mp.mesh().dp_rank(), s.ranks);
    data::Batch<float> b;
    for (std::size_t i = 0; i < s.steps; ++i) {
      if (!loader.next(b)) loader.seek(loader.epoch() + 1), loader.next(b);
      mp.step(b, s.batch);
    }
    world.barrier();
    const auto total = static_cast<std::int64_t>(mp.memory().total());
    const auto worst = world.allreduce_value(total, comm::ReduceOp::max);
    const MemoryReport& m = mp.memory();
    std::lock_guard<std::mutex> lock(mutex);
    if (world.rank() == 0)
      out = {{"zero", zero},
             {"predicted_bytes", worst},
             {"pgo_bytes", m.params + m.grads + m.optimizer + m.master},
             {"params", m.params}, {"grads", m.grads}, {"optimizer", m.optimizer},
             {"activations", m.activations}};
  });
  const std::size_t peak = proc_status("VmHWM");
  out["measured_bytes"] = (peak > before ? peak - before : 0) / static_cast<std::size_t>(s.ranks);
  return out;
}

}  // namespace
}  // namespace strata::bench

int main(int argc, char** argv) {
  using namespace strata;
  using namespace strata::bench;
  std::unique_ptr<Runtime> runtime;
  return app::guarded("strata-bench-zero", [&] {
    auto args = app::split_kokkos_args(argc, argv);
    Setup s;
    s.model_file = model_path("gpt-small.toml");
    std::string zeros_text = "0,1,2,3", json_path, throughput_model = model_path("gpt-mini.toml");
    int child = -1, reps = 5, throughput_ranks = 2;
    bool throughput = false, no_memory = false;
    double bucket_mb = 25;
    std::size_t throughput_steps = 3;
    CLI::App cli{"What the ZeRO stages save and cost on thread ranks: memory per rank (the "
                 "engine's accounting against the process's peak resident set) and interleaved "
                 "throughput.", "strata-bench-zero"};
    cli.add_option("--model", s.model_file, "model file of the memory table")->capture_default_str();
    cli.add_option("--dp", s.ranks, "data-parallel thread ranks of the memory table")
        ->capture_default_str()->check(CLI::Range(1, 64));
    cli.add_option("--batch-size", s.batch, "global batch (sequences)")->capture_default_str();
    cli.add_option("--steps", s.steps, "steps of the memory table")->capture_default_str();
    cli.add_option("--bucket-mb", bucket_mb, "unit size of the shards in MiB")->capture_default_str();
    cli.add_option("--zero", zeros_text, "ZeRO stages, comma-separated")->capture_default_str();
    cli.add_flag("--no-memory", no_memory, "skip the memory table");
    cli.add_flag("--throughput", throughput, "also the interleaved throughput table");
    cli.add_option("--throughput-model", throughput_model, "model file of the throughput table")
        ->capture_default_str();
    cli.add_option("--ranks", throughput_ranks, "thread ranks of the throughput table")
        ->capture_default_str()->check(CLI::Range(2, 64));
    cli.add_option("--reps", reps, "rounds of the throughput table")->capture_default_str();
    cli.add_option("--throughput-steps", throughput_steps, "steps per stage and round")
        ->capture_default_str();
    cli.add_option("--json", json_path, "also write the results as JSON lines");
    cli.add_option("--child-memory", child, "(internal) measure one stage's memory and print it")
        ->group("");
    if (!app::parse_cli(cli, args.program)) return app::exit_ok;
    s.bucket_bytes = static_cast<std::size_t>(bucket_mb * 1048576.0);
    std::vector<int> zeros;
    {
      std::stringstream in(zeros_text);
      std::string z;
      while (std::getline(in, z, ',')) {
        STRATA_REQUIRE(z == "0" || z == "1" || z == "2" || z == "3", config, "--zero ", zeros_text,
                       ": stages are 0, 1, 2 or 3");
        zeros.push_back(std::stoi(z));
      }
    }
    const int threads = std::max(no_memory ? 1 : s.ranks, throughput ? throughput_ranks : 1);
    std::string kthreads = kokkos_threads_option(threads);
    args.kokkos.insert(args.kokkos.end() - 1, kthreads.data());
    int kargc = static_cast<int>(args.kokkos.size()) - 1;
    runtime = std::make_unique<Runtime>(kargc, args.kokkos.data());
    if (child >= 0) {
      std::printf("%s\n", measure_memory(s, child).dump().c_str());
      return app::exit_ok;
    }
    std::ofstream json;
    if (!json_path.empty()) json.open(json_path);
    std::printf("# strata-bench-zero\n# %s\n", configuration().c_str());
    if (!no_memory) {
      std::printf("\n## Memory per rank: %s, dp %d, batch %zu, AdamW, units of %.3g MiB, %zu steps\n"
                  "%-6s %12s %12s %9s %12s %14s\n", s.model_file.c_str(), s.ranks, s.batch, bucket_mb,
                  s.steps, "stage", "predicted", "measured", "meas/pred", "P+G+O", "x dp / ZeRO-0");
      char self[4096];
      const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
      STRATA_REQUIRE(n > 0, runtime, "cannot find this program (/proc/self/exe)");
      self[n] = 0;
      double pgo0 = 0;
      for (int z : zeros) {
        std::ostringstream cmd;
        cmd << "'" << self << "' --child-memory " << z << " --model '" << s.model_file << "' --dp "
            << s.ranks << " --batch-size " << s.batch << " --steps " << s.steps << " --bucket-mb "
            << bucket_mb;
        FILE* p = popen(cmd.str().c_str(), "r");
        STRATA_REQUIRE(p != nullptr, runtime, "cannot run ", cmd.str());
        std::string text;
        char buf[4096];
        while (std::fgets(buf, sizeof buf, p)) text += buf;
        const int rc = pclose(p);
        STRATA_REQUIRE(rc == 0, runtime, "ZeRO-", z, " memory run failed (", rc, "): ", text);
        const auto j = nlohmann::json::parse(text.substr(text.rfind('{')));
        const double mib = 1048576.0;
        const double pred = j["predicted_bytes"].get<double>(), meas = j["measured_bytes"].get<double>();
        const double pgo = j["pgo_bytes"].get<double>();
        if (z == 0) pgo0 = pgo;
        char ratio[32] = "-";
        if (pgo0 > 0) std::snprintf(ratio, sizeof ratio, "%.3f", pgo * s.ranks / pgo0);
        std::printf("ZeRO-%d %10.1f M %10.1f M %9.3f %10.1f M %14s\n", z, pred / mib, meas / mib,
                    meas / pred, pgo / mib, ratio);
        std::fflush(stdout);
        if (json.is_open()) json << j.dump() << "\n";
      }
    }
    if (throughput) {
      const ModelSpec spec = read_model_file(throughput_model);
      const Tokens t = tokens_of(spec);
      Setup ts = s;
      ts.ranks = throughput_ranks;
      const auto data = data::make_synthetic_tokens(s.batch, t.context, t.vocab, 7);
      std::printf("\n## Throughput: %s, %d thread ranks, batch %zu, AdamW, units of %.3g MiB, "
                  "%d interleaved rounds of %zu steps\n", throughput_model.c_str(), throughput_ranks,
                  s.batch, bucket_mb, reps, throughput_steps);
      std::vector<std::vector<double>> rate(4);
      run_ranks(throughput_ranks, 1, [&](Context& ctx, comm::Communicator& world) {
        std::vector<std::unique_ptr<ModelParallel<float>>> mp(4);
        const std::size_t shard = data::BatchLoader<float>::shard(s.batch, 0, throughput_ranks).second;
        for (int z : zeros)
          mp[z] = std::make_unique<ModelParallel<float>>(ctx, world, spec, Init::kaiming_uniform, 1,
                                                         LossKind::cross_entropy,
                                                         OptimizerConfig{OptimizerKind::adamw, 1e-4},
                                                         shard, zero_options(ts, z));
        data::BatchLoader<float> loader(data, s.batch, false, 0, false, mp[zeros[0]]->mesh().dp_rank(),
                                        throughput_ranks);
        data::Batch<float> b;
        loader.next(b);
        for (int z : zeros) mp[z]->step(b, s.batch);  // warm-up
        for (int r = 0; r < reps; ++r)
          for (int z : zeros) {
            world.barrier();
            const auto t0 = Clock::now();
            for (std::size_t i = 0; i < throughput_steps; ++i) mp[z]->step(b, s.batch);
            world.barrier();
            if (world.rank() == 0)
              rate[z].push_back(static_cast<double>(s.batch * throughput_steps) / seconds_since(t0));
          }
      });
      std::printf("%-6s %-28s\n", "stage", "samples/s: median [min-max]");
      for (int z : zeros) {
        const Stats r = stats(rate[z]);
        std::printf("ZeRO-%d %.3g [%.3g-%.3g]%s\n", z, r.median, r.min, r.max, r.noisy() ? "*" : "");
        if (json.is_open())
          json << nlohmann::json{{"table", "throughput"}, {"zero", z}, {"samples_per_s", r.median},
                                 {"min", r.min}, {"max", r.max}}.dump() << "\n";
      }
      auto ratios = [&](int a, int b) {
        std::vector<double> q;
        for (std::size_t r = 0; r < rate[a].size() && r < rate[b].size(); ++r) q.push_back(rate[a][r] / rate[b][r]);
        return q;
      };
      const std::array<std::pair<int, int>, 2> pairs{{{2, 1}, {3, 0}}};
      for (const auto& [a, b] : pairs) {
        if (rate[a].empty() || rate[b].empty()) continue;
        const Stats q = stats(ratios(a, b));
        std::printf("ZeRO-%d / ZeRO-%d per round: %.3f [%.3f-%.3f]\n", a, b, q.median, q.min, q.max);
        if (json.is_open())
          json << nlohmann::json{{"table", "throughput"}, {"ratio", std::to_string(a) + "/" + std::to_string(b)},
                                 {"median", q.median}, {"min", q.min}, {"max", q.max}}.dump() << "\n";
      }
    }
    return app::exit_ok;
  });
}
