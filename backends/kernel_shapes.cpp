#include "backends/kernel_shapes.hpp"

#include "backends/error.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <vector>

namespace strata::kernel_shapes {

namespace {

struct Shape {
  std::size_t launches = 0, min_items = 0, max_items = 0;
  double seconds = 0;
};

struct Recorder {
  std::mutex mutex;
  std::map<std::string, Shape> kernels;
  std::chrono::steady_clock::time_point begin, end;
  bool stopped = false;
};

Recorder& recorder() {
  static Recorder r;
  return r;
}

// The items below which a kernel leaves a large GPU mostly idle: an H100 or
// H200 runs 132 x 2048 threads at once.
constexpr std::size_t gpu_items = 16384;

}  // namespace

void start() {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.kernels.clear();
  r.begin = std::chrono::steady_clock::now();
  r.stopped = false;
  detail::on.store(true);
}

void stop() {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!r.stopped) r.end = std::chrono::steady_clock::now();
  r.stopped = true;
  detail::on.store(false);
}

void record(const char* name, std::size_t items, double seconds) {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  Shape& s = r.kernels[name];
  s.min_items = s.launches == 0 ? items : std::min(s.min_items, items);
  s.max_items = std::max(s.max_items, items);
  ++s.launches;
  s.seconds += seconds;
}

std::string table() {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto end = r.stopped ? r.end : std::chrono::steady_clock::now();
  const double wall = std::chrono::duration<double>(end - r.begin).count();
  std::vector<std::pair<std::string, Shape>> rows(r.kernels.begin(), r.kernels.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  double kernels = 0;
  for (const auto& [name, s] : rows) kernels += s.seconds;
  std::ostringstream o;
  char line[512];
  std::snprintf(line, sizeof line,
                "%.3f s of wall time, %.3f s (%.1f%%) in %zu kernels launched through the launch "
                "wrapper (the rest: BLAS calls, communication, host work).\n\n",
                wall, kernels, wall > 0 ? 100 * kernels / wall : 0.0, rows.size());
  o << line;
  o << "| kernel | launches | items per launch | time (ms) | per launch (us) | share of wall |\n"
    << "|---|---:|---:|---:|---:|---:|\n";
  std::vector<std::string> narrow;
  for (const auto& [name, s] : rows) {
    const std::string items = s.min_items == s.max_items
                                  ? std::to_string(s.min_items)
                                  : std::to_string(s.min_items) + "-" + std::to_string(s.max_items);
    const double share = wall > 0 ? 100 * s.seconds / wall : 0;
    std::snprintf(line, sizeof line, "| %s | %zu | %s | %.2f | %.1f | %.2f%% |\n", name.c_str(),
                  s.launches, items.c_str(), 1e3 * s.seconds, 1e6 * s.seconds / s.launches, share);
    o << line;
    if (share > 1.0 && s.min_items < gpu_items) narrow.push_back(name);
  }
  o << "\nKernels over 1% of the wall time with launches under " << gpu_items << " items: ";
  if (narrow.empty()) o << "none.\n";
  for (std::size_t i = 0; i < narrow.size(); ++i)
    o << narrow[i] << (i + 1 < narrow.size() ? ", " : ".\n");
  return o.str();
}

void write(const std::string& path) {
  std::ofstream f(path);
  STRATA_REQUIRE(f.good(), runtime, "--kernel-shapes: cannot write '", path, "'");
  f << table();
  STRATA_REQUIRE(f.good(), runtime, "--kernel-shapes: writing '", path, "' failed");
}

}  // namespace strata::kernel_shapes
