#include "backends/trace.hpp"

#include "backends/error.hpp"

#include <Kokkos_Core.hpp>

#include <fstream>
#include <map>
#include <mutex>
#include <vector>

namespace strata::trace {
namespace {

using Clock = std::chrono::steady_clock;

struct Event {
  const char* category;
  std::string name;
  double start_us, duration_us;
  int lane;
};

struct State {
  std::atomic<bool> on{false};
  Clock::time_point origin = Clock::now();
  std::mutex mutex;
  std::vector<Event> events;
  std::map<int, std::string> lane_names;
};

State& state() {
  static State s;
  return s;
}

thread_local int t_lane = 0;

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out;
}

}  // namespace

void start() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.origin = Clock::now();
  s.events.clear();
  s.on.store(true, std::memory_order_release);
}

bool enabled() { return state().on.load(std::memory_order_relaxed); }

// Kokkos Tools are loaded by Kokkos::initialize (KOKKOS_TOOLS_LIBS); asking
// Kokkos costs a comparison of every callback, so ask once.
bool kokkos_tools_loaded() {
  static const bool loaded = Kokkos::Tools::profileLibraryLoaded();
  return loaded;
}

bool active() { return enabled() || kokkos_tools_loaded(); }

void set_lane(int lane) { t_lane = lane; }
int lane() { return t_lane; }

void name_lane(int lane, const std::string& name) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.lane_names[lane] = name;
}

Span::Span(const char* category, std::string name) {
  if (name.empty()) return;  // not active when the name was built
  on_ = true;
  category_ = category;
  name_ = std::move(name);
  if (kokkos_tools_loaded()) Kokkos::Tools::pushRegion(name_);
  start_ = Clock::now();
}

Span::~Span() {
  if (!on_) return;
  const auto end = Clock::now();
  if (kokkos_tools_loaded()) Kokkos::Tools::popRegion();
  State& s = state();
  if (!s.on.load(std::memory_order_relaxed)) return;
  const double start_us = std::chrono::duration<double, std::micro>(start_ - s.origin).count();
  const double duration_us = std::chrono::duration<double, std::micro>(end - start_).count();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.events.push_back({category_, std::move(name_), start_us, duration_us, t_lane});
}

void write(const std::string& path, int process) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  std::ofstream out(path, std::ios::trunc);
  STRATA_REQUIRE(out.good(), runtime, "--trace: cannot open '", path, "' for writing");
  out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  out << "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" << process
      << ",\"args\":{\"name\":\"process " << process << "\"}}";
  for (const auto& [lane, name] : s.lane_names)
    out << ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" << process << ",\"tid\":" << lane
        << ",\"args\":{\"name\":\"" << escape(name) << "\"}}";
  char buf[128];
  for (const auto& e : s.events) {
    std::snprintf(buf, sizeof buf, "\"ts\":%.3f,\"dur\":%.3f", e.start_us, e.duration_us);
    out << ",\n{\"name\":\"" << escape(e.name) << "\",\"cat\":\"" << e.category
        << "\",\"ph\":\"X\",\"pid\":" << process << ",\"tid\":" << e.lane << "," << buf << "}";
  }
  out << "\n]}\n";
  out.flush();
  STRATA_REQUIRE(out.good(), runtime, "--trace: write to '", path, "' failed");
}

}  // namespace strata::trace
