#include "planner/calibrate.hpp"

#include "backends/clock.hpp"
#include "backends/context.hpp"
#include "backends/error.hpp"
#include "backends/launch.hpp"
#include "backends/ranks.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <vector>

namespace strata::planner {

CalibrationFit fit_rate(const std::vector<double>& x, const std::vector<double>& t) {
  STRATA_REQUIRE(x.size() == t.size() && x.size() >= 2, config,
                 "calibration: a fit needs two points or more");
  // Minimise sum (a x + b - t)^2 / t: the relative error of each point
  // weighted by its time (a step's time is mostly its large GEMMs).
  double sw = 0, sx = 0, st = 0, sxx = 0, sxt = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double w = 1.0 / t[i];
    sw += w, sx += w * x[i], st += w * t[i], sxx += w * x[i] * x[i], sxt += w * x[i] * t[i];
  }
  const double det = sw * sxx - sx * sx;
  STRATA_REQUIRE(det > 0, config, "calibration: the points of a fit have one x only");
  const double a = (sw * sxt - sx * st) / det, b = (sxx * st - sx * sxt) / det;
  STRATA_REQUIRE(a > 0, runtime, "calibration: times do not grow with size (a noisy machine?)");
  return {1.0 / a, std::max(0.0, b) / a};
}

namespace {

// The median over 5 repetitions of the time of f, each repetition calling it
// often enough for `least` seconds.
template <class F>
double time_of(const F& f, double least = 0.02) {
  f();  // warm
  int calls = 1;
  for (;;) {
    const auto t0 = Clock::now();
    for (int i = 0; i < calls; ++i) f();
    if (seconds_since(t0) >= least || calls >= (1 << 20)) break;
    calls *= 2;
  }
  std::vector<double> reps;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < calls; ++i) f();
    reps.push_back(seconds_since(t0) / calls);
  }
  std::sort(reps.begin(), reps.end());
  return reps[2];
}

// Kernels of the measurements (free functions: nvcc takes no device lambda
// inside another lambda).
void scale_copy(const ExecSpace& exec, VectorBuffer<float> x, VectorBuffer<float> y) {
  Kokkos::parallel_for("strata::calibrate::copy", Range(exec, 0, x.extent(0)),
                       KOKKOS_LAMBDA(const std::size_t i) { y(i) = 2.0f * x(i); });
  exec.fence();
}

void empty_kernel(const ExecSpace& exec, VectorBuffer<float> x) {
  Kokkos::parallel_for("strata::calibrate::launch", Range(exec, 0, x.extent(0)),
                       KOKKOS_LAMBDA(const std::size_t i) { x(i) = 0.0f; });
  exec.fence();
}

std::string g(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}
}  // namespace

double node_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kib = 0;
  while (in >> key) {
    if (key == "MemTotal:") {
      in >> kib;
      break;
    }
    std::string rest;
    std::getline(in, rest);
  }
  STRATA_REQUIRE(kib > 0, runtime, "cannot read this node's memory (MemTotal in /proc/meminfo)");
  return kib * 1024;
}

namespace {
// A collective the link calibration times: its name in the log, and the call
// on a rank's buffer.
struct TimedCollective {
  std::string what;
  std::function<void(comm::Communicator&, std::vector<float>&)> run;
};

// Times each collective on two thread ranks for each size (bytes), the
// collectives interleaved within each repetition so that a slow phase of the
// machine falls on all of them alike (their ratio is what the cost model
// uses), and fits t = 2 latency + bytes / bandwidth (a ring of two) to each.
// Both ranks run the same number of calls: rank 0's count, agreed through
// the communicator (two ranks that chose their counts apart would leave one
// waiting for a partner).
std::vector<Link> fit_links(const std::vector<double>& bytes, int threads,
                            const std::function<void(const std::string&)>& log,
                            const std::vector<TimedCollective>& collectives) {
  const std::size_t n = collectives.size();
  std::vector<std::vector<double>> times(n);
  for (const double b : bytes) {
    std::vector<double> median(n, 0);
    run_ranks(2, threads, [&](Context&, comm::Communicator& comm) {
      std::vector<float> buf(static_cast<std::size_t>(b) / sizeof(float), 1.0f);
      for (const auto& c : collectives) c.run(comm, buf);  // warm
      // Calls per repetition: enough for 20 ms of the slowest collective.
      std::int32_t calls = 1;
      for (;;) {
        const auto t0 = Clock::now();
        for (std::int32_t i = 0; i < calls; ++i)
          for (const auto& c : collectives) c.run(comm, buf);
        std::int32_t more = seconds_since(t0) < 0.02 * static_cast<double>(n) && calls < (1 << 20);
        comm.broadcast(&more, 1, comm::DataType::i32, 0);
        if (!more) break;
        calls *= 2;
      }
      std::vector<std::vector<double>> reps(n);
      for (int r = 0; r < 5; ++r)
        for (std::size_t k = 0; k < n; ++k) {
          comm.barrier();
          const auto t0 = Clock::now();
          for (std::int32_t i = 0; i < calls; ++i) collectives[k].run(comm, buf);
          reps[k].push_back(seconds_since(t0) / calls);
        }
      if (comm.rank() == 0)
        for (std::size_t k = 0; k < n; ++k) {
          std::sort(reps[k].begin(), reps[k].end());
          median[k] = reps[k][2];
        }
    });
    for (std::size_t k = 0; k < n; ++k) {
      times[k].push_back(median[k]);
      log(collectives[k].what + " " + std::to_string(static_cast<std::size_t>(b) / 1024) +
          " KiB, 2 thread ranks: " + g(median[k] * 1e6) + " us");
    }
  }
  std::vector<Link> links;
  for (std::size_t k = 0; k < n; ++k) {
    const CalibrationFit fit = fit_rate(bytes, times[k]);
    links.push_back({fit.offset / fit.rate / 2, fit.rate});
    log(collectives[k].what + " fit: latency " + g(links.back().latency * 1e6) + " us, bandwidth " +
        g(links.back().bandwidth / 1e9) + " GB/s");
  }
  return links;
}
}  // namespace

MachineProfile calibrate(const std::function<void(const std::string&)>& log) {
  MachineProfile p;
  p.gpu = !host_kernels;
  STRATA_REQUIRE(host_kernels, config, "strata-plan calibrate measures host (CPU) machines; "
                 "write a GPU cluster's profile by hand (planner/profiles/)");
  Context ctx;
  const int cores = std::max(1, ctx.threads);
  p.name = "calibrated host (" + std::to_string(cores) + " cores)";
  p.nodes = 1;
  p.devices_per_node = cores;
  p.memory_per_node = node_memory();

  // GEMM rate: x W^T shapes of layers, every thread.
  std::vector<double> flops, times;
  for (int rows : {32, 128, 512})
    for (int width : {128, 512, 2048}) {
      VectorBuffer<float> a("a", std::size_t(rows) * width), w("w", std::size_t(width) * width),
          y("y", std::size_t(rows) * width);
      Kokkos::deep_copy(a, 0.5f);
      Kokkos::deep_copy(w, 0.25f);
      const double t = time_of([&] {
        ctx.blas.gemm(Op::N, Op::T, rows, width, width, 1.0f, a.data(), width, w.data(), width,
                      0.0f, y.data(), width);
        ctx.exec.fence();
      });
      flops.push_back(2.0 * rows * width * width);
      times.push_back(t);
      log("gemm " + std::to_string(rows) + " x " + std::to_string(width) + " x " +
          std::to_string(width) + ": " + g(flops.back() / t / 1e9) + " GFLOP/s");
    }
  const CalibrationFit gemm = fit_rate(flops, times);
  p.gemm_flops_fp32 = gemm.rate / cores;
  p.gemm_flops_16 = p.gemm_flops_fp32;  // host GEMMs compute 16-bit storage in float
  p.gemm_half_flops = std::max(gemm.offset, 1.0);
  log("gemm fit: " + g(gemm.rate / 1e9) + " GFLOP/s on " + std::to_string(cores) +
      " cores, half of it at " + g(gemm.offset / 1e6) + " MFLOP");

  // Memory bandwidth: y = 2 x over 256 MiB arrays (read one, write one).
  {
    const std::size_t n = std::size_t(64) << 20;
    VectorBuffer<float> x("x", n), y("y", n);
    Kokkos::deep_copy(x, 1.0f);
    const double t = time_of([&] { scale_copy(ctx.exec, x, y); }, 0.1);
    p.memory_bandwidth = 2.0 * n * sizeof(float) / t;
    log("memory bandwidth: " + g(p.memory_bandwidth / 1e9) + " GB/s");
  }
  // Launch: an empty kernel over the pool.
  {
    VectorBuffer<float> x("x", std::size_t(cores));
    p.launch = time_of([&] { empty_kernel(ctx.exec, x); });
    log("kernel launch: " + g(p.launch * 1e6) + " us");
  }
  // The link between two thread ranks: allreduce of 4 KiB to 64 MiB. The
  // large sizes do not fit in a cache, as a model's gradients do not. Then
  // ZeRO-1's sums at the same sizes: a reduce-scatter and an allgather, in place.
  if (thread_ranks_unavailable().empty() && cores >= 2) {
    std::vector<double> bytes;
    for (std::size_t kib = 4; kib <= 65536; kib *= 4) bytes.push_back(static_cast<double>(kib) * 1024);
    const int threads = std::max(1, cores / 2);
    const std::vector<Link> links = fit_links(
        bytes, threads, log,
        {{"allreduce",
          [](comm::Communicator& comm, std::vector<float>& buf) {
            comm.allreduce(buf.data(), buf.data(), buf.size(), comm::DataType::f32,
                           comm::ReduceOp::sum);
          }},
         {"reduce-scatter + allgather (ZeRO-1)",
          [](comm::Communicator& comm, std::vector<float>& buf) {
            const std::size_t half = buf.size() / 2;
            float* mine = buf.data() + half * static_cast<std::size_t>(comm.rank());
            comm.reduce_scatter(buf.data(), mine, half, comm::DataType::f32, comm::ReduceOp::sum);
            comm.allgather(mine, buf.data(), half, comm::DataType::f32);
          }}});
    p.intra_node = links[0];
    p.reduce_scatter_allgather = links[1];
  } else {
    p.intra_node = {5e-6, 5e9};
    log("link: no thread ranks here (" + thread_ranks_unavailable() +
        "); a placeholder of 5 us and 5 GB/s");
  }
  p.inter_node = p.intra_node;
  p.source = "strata-plan calibrate (one node; inter_node copies the thread ranks' link)";
  return p;
}

void measure_gemms(MachineProfile& p, const std::vector<GemmShape>& shapes, int ranks,
                   const std::function<void(const std::string&)>& log) {
  STRATA_REQUIRE(ranks >= 1, config, "calibration: ranks must be positive");
  STRATA_REQUIRE(ranks == 1 || thread_ranks_unavailable().empty(), config,
                 "calibration: no thread ranks here (", thread_ranks_unavailable(), ")");
  const int cores = std::max(1, Context().threads);
  const int threads = std::max(1, cores / ranks);
  const auto t0 = Clock::now();
  std::size_t done = 0;
  for (const GemmShape& shape : shapes) {
    MeasuredGemm m{shape.rows, shape.n, shape.k, threads, ranks, 0, 0};
    run_ranks(ranks, threads, [&](Context& ctx, comm::Communicator& comm) {
      const int r = static_cast<int>(shape.rows), n = static_cast<int>(shape.n),
                k = static_cast<int>(shape.k);
      VectorBuffer<float> x("x", shape.rows * shape.k), w("w", shape.n * shape.k),
          y("y", shape.rows * shape.n), dx("dx", shape.rows * shape.k), dw("dw", shape.n * shape.k);
      Kokkos::deep_copy(x, 0.5f);
      Kokkos::deep_copy(w, 0.25f);
      Kokkos::deep_copy(y, 0.125f);
      comm.barrier();
      // Forward y = x W^T; backward dx = dy W, dW = dy^T x (as Linear).
      const double f = time_of(
          [&] {
            ctx.blas.gemm(Op::N, Op::T, r, n, k, 1.0f, x.data(), k, w.data(), k, 0.0f, y.data(), n);
            ctx.exec.fence();
          },
          0.01);
      comm.barrier();
      const double b = time_of(
          [&] {
            ctx.blas.gemm(Op::N, Op::N, r, k, n, 1.0f, y.data(), n, w.data(), k, 0.0f, dx.data(), k);
            ctx.blas.gemm(Op::T, Op::N, n, k, r, 1.0f, y.data(), n, x.data(), k, 0.0f, dw.data(), k);
            ctx.exec.fence();
          },
          0.01);
      if (comm.rank() == 0) m.forward = f, m.backward = b;
    });
    p.measured_gemms.push_back(m);
    if (++done % 10 == 0 || done == shapes.size())
      log("model GEMMs: " + std::to_string(done) + " of " + std::to_string(shapes.size()) +
          " shapes on " + std::to_string(ranks) + " rank(s) x " + std::to_string(threads) +
          " thread(s), " + g(seconds_since(t0)) + " s");
  }
}

}  // namespace strata::planner
