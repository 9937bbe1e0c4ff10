#include "benchmarks/common/bench_utils.hpp"

#include <atomic>
#include <cstdint>
#include <cstdlib>

#include "backends/runtime.hpp"
#include "strata_commit.hpp"
#include "strata_config.hpp"

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <thread>

namespace strata::bench {

Stats stats(std::vector<double> s) {
  Stats r;
  if (s.empty()) return r;
  std::sort(s.begin(), s.end());
  r.n = s.size();
  r.min = s.front();
  r.max = s.back();
  r.median = s.size() % 2 ? s[s.size() / 2] : 0.5 * (s[s.size() / 2 - 1] + s[s.size() / 2]);
  return r;
}

std::string configuration() {
  std::string c = build_summary() + " (commit " STRATA_GIT_COMMIT "), " +
                  std::to_string(Kokkos::DefaultHostExecutionSpace().concurrency()) +
                  " host threads, compiler " STRATA_COMPILER;
  return c;
}

namespace {
// Best rate (bytes per second) over `reps` repetitions of `threads` threads
// each running part(begin, end) on its share of n elements; `bytes` is what
// one repetition moves.
template <class Part>
double best_rate(std::size_t n, double bytes, int threads, int reps, const Part& part) {
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t)
      ts.emplace_back([&, t] { part(n * t / threads, n * (t + 1) / threads); });
    for (auto& t : ts) t.join();
    best = std::max(best, bytes / seconds(t0, Clock::now()));
  }
  return best;
}
}  // namespace

double copy_bandwidth(std::size_t bytes, int threads, int reps) {
  const std::size_t n = bytes / sizeof(double);
  std::vector<double> a(n, 1.0), b(n, 0.0);
  return best_rate(n, 2.0 * n * sizeof(double), threads, reps, [&](std::size_t begin, std::size_t end) {
    std::memcpy(b.data() + begin, a.data() + begin, (end - begin) * sizeof(double));
  });
}

double read_bandwidth(std::size_t bytes, int threads, int reps, int passes) {
  const std::size_t n = bytes / sizeof(std::uint64_t);
  std::vector<std::uint64_t> a(n, 1);
  std::atomic<std::uint64_t> sink{0};
  const double best = best_rate(
      n, static_cast<double>(passes) * n * sizeof(std::uint64_t), threads, reps,
      [&](std::size_t begin, std::size_t end) {
        // Four independent sums: loads, not the add chain, set the pace.
        std::uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (int p = 0; p < passes; ++p) {
          std::size_t i = begin;
          for (; i + 4 <= end; i += 4) {
            s0 += a[i];
            s1 += a[i + 1];
            s2 += a[i + 2];
            s3 += a[i + 3];
          }
          for (; i < end; ++i) s0 += a[i];
        }
        sink.fetch_add(s0 + s1 + s2 + s3, std::memory_order_relaxed);
      });
  if (sink.load() != static_cast<std::uint64_t>(reps) * passes * n) std::abort();  // every byte was read
  return best;
}

std::string rate_text(const Stats& s) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.0f [%.0f-%.0f]%s", s.median, s.min, s.max, s.noisy() ? "*" : "");
  return buf;
}

}  // namespace strata::bench
