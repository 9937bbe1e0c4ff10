// strata-bench-collectives: allreduce, reduce-scatter or allgather (--op; in
// place, float32, summing where it reduces) over message sizes for each communicator, nccl-tests
// style, with the machine's copy bandwidth and the raw MPI call measured in
// the same run.
//
//   strata-bench-collectives                  thread ranks (default 2) only
//   mpirun -np 2 strata-bench-collectives     + Strata's MPI communicator and raw MPI
//
// The size S is the whole buffer of a rank, as in nccl-tests: reduce-scatter
// reduces S into S / n per rank (as ZeRO-1 its gradients), allgather gathers
// S / n per rank into S (ZeRO-1's parameters), reduce_scatter_allgather
// both in turn (ZeRO-1's step, against one allreduce). busbw = algbw x
// 2 (n - 1) / n for allreduce and the pair, algbw x (n - 1) / n for the two
// alone.
// "of read bound" = (V / R) / time, where V is what the operation must read
// on n ranks sharing memory (allreduce and reduce-scatter each input once,
// n S; allgather the n - 1 other ranks' parts, (n - 1) S; the pair both,
// (2 n - 1) S) and R the read
// bandwidth of n threads summing an array of V bytes (read repeatedly: warm
// in whatever cache holds it, as the repeated operation finds its buffers),
// measured right before and right after that size's timing (R is their
// mean; both are in the JSON rows). A figure above 100% means the reference
// was measured under other conditions. Sizes below 64 KiB get no bound (the
// read takes less than the threads' synchronisation). The STREAM copy
// bandwidth is printed for reference; its traffic is ambiguous (read +
// write, with or without the write-allocate read).
#include "apps/common/app_main.hpp"
#include "apps/common/cli.hpp"
#include "backends/comm/threads.hpp"
#include "backends/runtime.hpp"
#include "benchmarks/common/bench_utils.hpp"
#include "strata_config.hpp"
#if STRATA_HAS_MPI
#include "backends/comm/mpi.hpp"
#endif

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <thread>

namespace strata::bench {
namespace {

struct Options {
  int ranks = 2;
  std::size_t min_bytes = 4, max_bytes = std::size_t(128) << 20;
  int reps = 5;
  double seconds_per_rep = 0.02;
  std::string json_path;  // also write every row as a JSON line (rank 0)
  std::string op = "allreduce";
  bool touch = false;  // each rank writes its whole buffer before every call
};

// What --op runs: the collective on a rank's buffer of `count` floats (a
// multiple of the ranks; in place), its busbw factor and the bytes it must
// read on n ranks sharing memory, for a buffer of S bytes.
struct Collective {
  std::string name;
  bool reduces_scatters() const {
    return name == "reduce_scatter" || name == "reduce_scatter_allgather";
  }
  double bus_factor(int n) const {
    const bool twice = name == "allreduce" || name == "reduce_scatter_allgather";
    return (twice ? 2.0 : 1.0) * (n - 1) / n;
  }
  std::size_t must_read(int n, std::size_t bytes) const {
    const std::size_t k = static_cast<std::size_t>(n);
    if (name == "allgather") return (k - 1) * bytes;
    if (name == "reduce_scatter_allgather") return (2 * k - 1) * bytes;
    return k * bytes;
  }
  void run(comm::Communicator& c, float* buf, std::size_t count) const {
    const std::size_t part = count / static_cast<std::size_t>(c.size());
    float* mine = buf + part * static_cast<std::size_t>(c.rank());
    if (name == "allreduce")
      c.allreduce(buf, buf, count, comm::DataType::f32, comm::ReduceOp::sum);
    if (reduces_scatters())
      c.reduce_scatter(buf, mine, part, comm::DataType::f32, comm::ReduceOp::sum);
    if (name == "allgather" || name == "reduce_scatter_allgather")
      c.allgather(mine, buf, part, comm::DataType::f32);
  }
};

std::ofstream json_out;

// Iterations per repetition: about seconds_per_rep at ~5 GB/s, at least 3.
int iterations(std::size_t bytes, const Options& o) {
  const double est = o.seconds_per_rep * 5e9 / std::max<std::size_t>(bytes, 4096);
  return static_cast<int>(std::clamp(est, 3.0, 20000.0));
}

// Copy-bandwidth array: out of cache (>= 2x the largest message, 1-256 MiB).
std::size_t copy_bytes(const Options& o) {
  return std::clamp<std::size_t>(2 * o.max_bytes, std::size_t(1) << 20, std::size_t(256) << 20);
}

// Times `op` on every rank of `c`; returns the per-operation times of rank 0.
Stats time_op(comm::Communicator& c, int iters, int reps, const std::function<void()>& op,
              const std::function<void()>& barrier) {
  std::vector<double> samples;
  op();  // warm-up (first touch, connection setup)
  for (int r = 0; r < reps; ++r) {
    barrier();
    const auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) op();
    barrier();
    samples.push_back(seconds(t0, Clock::now()) / iters);
  }
  (void)c;
  return stats(samples);
}

void print_header() {
  std::printf("%-10s %5s %10s %28s %10s %10s %12s\n", "backend", "ranks", "size",
              "time us: median [min-max]", "algbw GB/s", "busbw GB/s", "ratio");
}

void print_row(const Collective& op, const char* backend, int n, std::size_t bytes,
               const Stats& t, const std::string& ratio, double read_before = 0,
               double read_after = 0) {
  const double algbw = bytes / t.median / 1e9;
  const double busbw = algbw * op.bus_factor(n);
  char time[64];
  std::snprintf(time, sizeof time, "%.2f [%.2f-%.2f]%s", t.median * 1e6, t.min * 1e6, t.max * 1e6,
                t.noisy() ? " *" : "");
  std::printf("%-10s %5d %10s %28s %10.2f %10.2f %12s\n", backend, n, format_bytes(bytes).c_str(),
              time, algbw, busbw, ratio.c_str());
  std::fflush(stdout);
  if (json_out.is_open())
    json_out << nlohmann::json{{"op", op.name}, {"backend", backend}, {"ranks", n}, {"bytes", bytes},
                               {"time_s", t.median}, {"time_min_s", t.min}, {"time_max_s", t.max},
                               {"algbw_gbps", algbw}, {"busbw_gbps", busbw},
                               {"busbw_min_gbps", bytes / t.max / 1e9 * op.bus_factor(n)},
                               {"busbw_max_gbps", bytes / t.min / 1e9 * op.bus_factor(n)},
                               {"ratio", ratio}, {"read_before_gbps", read_before / 1e9},
                               {"read_after_gbps", read_after / 1e9}}.dump()
             << std::endl;
}

// Message sizes growing x4; for reduce-scatter and allgather each a whole
// number of floats per rank (sizes that are not are rounded down; none below
// one float per rank).
std::vector<std::size_t> sizes(const Options& o, int ranks) {
  std::vector<std::size_t> s;
  const std::size_t unit =
      sizeof(float) * (o.op == "allreduce" ? 1 : static_cast<std::size_t>(ranks));
  for (std::size_t b = o.min_bytes; b <= o.max_bytes; b *= 4)
    if (b >= unit && (s.empty() || b / unit * unit != s.back())) s.push_back(b / unit * unit);
  return s;
}

// The raw MPI calls of `op` on the world communicator, in place: those
// Strata's MPI communicator makes, or with `block` MPI_Reduce_scatter_block
// for the reduce-scatter (the call made for equal blocks, which Strata
// avoids: on Open MPI 4.1 it ran 18-24x slower than an allreduce from 1 MiB).
#if STRATA_HAS_MPI
// `counts`: every rank's part (MPI_Reduce_scatter's receive counts).
void raw_mpi_call(const Collective& op, MPI_Comm comm, float* buf, std::size_t count,
                  const std::vector<int>& counts, bool block = false) {
  const int part = counts[0];
  if (op.name == "allreduce")
    MPI_Allreduce(MPI_IN_PLACE, buf, static_cast<int>(count), MPI_FLOAT, MPI_SUM, comm);
  // In place: the result lands in the first part of buf (MPI's rule), not
  // in the rank's own part as Strata's in-place reduce-scatter leaves it.
  if (op.reduces_scatters() && block)
    MPI_Reduce_scatter_block(MPI_IN_PLACE, buf, part, MPI_FLOAT, MPI_SUM, comm);
  if (op.reduces_scatters() && !block)
    MPI_Reduce_scatter(MPI_IN_PLACE, buf, counts.data(), MPI_FLOAT, MPI_SUM, comm);
  if (op.name == "allgather" || op.name == "reduce_scatter_allgather")
    MPI_Allgather(MPI_IN_PLACE, part, MPI_FLOAT, buf, part, MPI_FLOAT, comm);
}
#endif

int run(const Options& o, comm::Communicator& world) {
  const bool root = world.rank() == 0;
  const Collective op{o.op};
  std::map<std::size_t, double> raw_mpi;  // bytes -> median seconds
  if (root && !o.json_path.empty()) {
    json_out.open(o.json_path);
    STRATA_REQUIRE(json_out.is_open(), config, "--json: cannot write '", o.json_path, "'");
  }
  if (root) {
    std::printf("# strata-bench-collectives: %s in place, float32%s, %d repetitions; "
                "median [min-max]; * = max/min > 1.2 (noisy, re-run)\n# %s\n",
                op.name.c_str(), op.name == "allgather" ? "" : " sum", o.reps,
                configuration().c_str());
    const double b1 = copy_bandwidth(copy_bytes(o), 1);
    const double bn = copy_bandwidth(copy_bytes(o), o.ranks);
    std::printf("# STREAM copy bandwidth (read + write, no write-allocate counted): 1 thread %.1f "
                "GB/s, %d threads %.1f GB/s (for reference; the bound below uses reads)\n",
                b1 / 1e9, o.ranks, bn / 1e9);
    print_header();
  }
#if STRATA_HAS_MPI
  if (world.size() > 1) {
    auto& mpi = dynamic_cast<comm::MpiComm&>(world);
    const int n = world.size();
    for (std::size_t bytes : sizes(o, n)) {
      const std::size_t count = bytes / sizeof(float);
      std::vector<float> buf(count, 1.0f);
      const std::vector<int> counts(static_cast<std::size_t>(n), static_cast<int>(count / n));
      const int iters = iterations(bytes, o);
      auto raw = time_op(world, iters, o.reps, [&] {
        raw_mpi_call(op, mpi.native(), buf.data(), count, counts);
      }, [&] { MPI_Barrier(mpi.native()); });
      auto ours = time_op(world, iters, o.reps, [&] { op.run(world, buf.data(), count); },
                          [&] { MPI_Barrier(mpi.native()); });
      raw_mpi[bytes] = raw.median;
      if (root) print_row(op, "raw-mpi", n, bytes, raw, "1.00");
      if (op.reduces_scatters()) {
        auto blk = time_op(world, iters, o.reps, [&] {
          raw_mpi_call(op, mpi.native(), buf.data(), count, counts, true);
        }, [&] { MPI_Barrier(mpi.native()); });
        char r[32];
        std::snprintf(r, sizeof r, "%.2f x raw", raw.median / blk.median);
        if (root) print_row(op, "raw-blk", n, bytes, blk, r);
      }
      if (root) {
        char r[32];
        std::snprintf(r, sizeof r, "%.2f x raw", raw.median / ours.median);
        print_row(op, "mpi", n, bytes, ours, r);
      }
    }
  }
#endif
  if (root) {
    const int n = o.ranks;
    for (std::size_t bytes : sizes(o, n)) {
      const std::size_t working_set = op.must_read(n, bytes);
      const bool bounded = bytes >= (std::size_t(64) << 10) && working_set > 0;
      // Enough passes for about 256 MiB of reading per repetition.
      const int passes = static_cast<int>(std::max<std::size_t>(1, (std::size_t(256) << 20) / std::max<std::size_t>(working_set, 1)));
      const double read_before = bounded ? read_bandwidth(working_set, n, 5, passes) : 0;
      const std::size_t count = bytes / sizeof(float);
      const int iters = iterations(bytes, o);
      Stats t, touch;
      comm::run_thread_ranks(n, [&](comm::Communicator& c) {
        std::vector<float> buf(count, 1.0f);  // first touch by the rank's own thread
        auto write = [&] { std::fill(buf.begin(), buf.end(), 1.0f); };
        auto s = time_op(c, iters, o.reps, [&] {
          if (o.touch) write();
          op.run(c, buf.data(), count);
        }, [&] { c.barrier(); });
        if (c.rank() == 0) t = s;
        if (o.touch) {
          auto w = time_op(c, iters, o.reps, write, [&] { c.barrier(); });
          if (c.rank() == 0) touch = w;
        }
      });
      if (o.touch) print_row(op, "touch", n, bytes, touch, "writing alone");
      const double read_after = bounded ? read_bandwidth(working_set, n, 5, passes) : 0;
      std::string r;
      char buf[64];
      if (raw_mpi.count(bytes)) {
        std::snprintf(buf, sizeof buf, "%.2f x raw", raw_mpi[bytes] / t.median);
        r = buf;
      }
      if (bounded) {
        const double bound = static_cast<double>(working_set) / ((read_before + read_after) / 2);
        std::snprintf(buf, sizeof buf, "%s%.0f%% of read bound", r.empty() ? "" : ", ",
                      100 * bound / t.median);
        r += buf;
      }
      print_row(op, "threads", n, bytes, t, r, read_before, read_after);
    }
  }
#if STRATA_HAS_MPI
  // Wait without spinning (MPI_Barrier busy-polls, which would steal a core
  // from the thread ranks measured on rank 0 above).
  if (world.size() > 1) {
    MPI_Request req;
    MPI_Ibarrier(dynamic_cast<comm::MpiComm&>(world).native(), &req);
    for (int done = 0; !done;) {
      MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
#endif
  return 0;
}

}  // namespace
}  // namespace strata::bench

int main(int argc, char** argv) {
  using namespace strata;
  return app::guarded("strata-bench-collectives", [&] {
    auto args = app::split_kokkos_args(argc, argv);
    bench::Options o;
    CLI::App cli{"Allreduce, reduce-scatter or allgather bandwidth and latency of Strata's "
                 "communicators (nccl-tests style), with the raw MPI call and the copy bandwidth "
                 "in the same run. Run under mpirun "
                 "for the MPI rows.",
                 "strata-bench-collectives"};
    cli.add_option("--ranks", o.ranks, "thread ranks")->capture_default_str()->check(CLI::Range(1, 64));
    cli.add_option("--min-bytes", o.min_bytes, "smallest message")->capture_default_str();
    cli.add_option("--max-bytes", o.max_bytes, "largest message (sizes grow x4)")->capture_default_str();
    cli.add_option("--reps", o.reps, "repetitions per size")->capture_default_str()->check(CLI::Range(1, 1000));
    cli.add_option("--seconds-per-rep", o.seconds_per_rep, "target time per repetition")->capture_default_str();
    cli.add_option("--op", o.op,
                   "collective: allreduce, reduce_scatter (S to S / ranks, as ZeRO-1's gradients), "
                   "allgather (S / ranks to S, ZeRO-1's parameters) or reduce_scatter_allgather "
                   "(both, ZeRO-1's step); S is a rank's whole buffer")
        ->capture_default_str()
        ->check(CLI::IsMember({"allreduce", "reduce_scatter", "allgather", "reduce_scatter_allgather"}));
    cli.add_flag("--touch", o.touch,
                 "thread ranks: each rank writes its whole buffer before every call, as backward "
                 "writes the gradients, so the collective meets the caches a training step leaves "
                 "(the time includes the writing, which the `touch` row times alone; the one "
                 "buffer is also the allgather's output, which in training holds parameters that "
                 "were only read: pessimistic for the allgather)");
    cli.add_option("--json", o.json_path, "also write every row as a JSON line to this file");
    if (!app::parse_cli(cli, args.program)) return app::exit_ok;
    STRATA_REQUIRE(o.min_bytes >= 4 && o.min_bytes <= o.max_bytes, config,
                   "--min-bytes must be >= 4 and <= --max-bytes");
    int kargc = static_cast<int>(args.kokkos.size()) - 1;
    Runtime runtime(kargc, args.kokkos.data());
    auto world = world_communicator();
    return bench::run(o, *world);
  });
}
