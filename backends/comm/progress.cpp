#include "backends/comm/progress.hpp"

#include <mutex>

namespace strata::comm::progress {
namespace {

struct State {
  std::mutex mutex;
  bool stepping = false;
  std::uint64_t step = 0;
  std::string dir;            // the newest complete checkpoint's folder ("" none)
  std::uint64_t saved = 0;    // and its step
  std::string pending_dir;    // written by another rank, not yet known complete
  std::uint64_t pending = 0;
  bool has_pending = false;
};

State& state() {
  static State s;
  return s;
}

}  // namespace

void set_step(std::uint64_t step) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.stepping = true;
  s.step = step;
}

void checkpoint_saved(const std::string& dir, std::uint64_t step, bool complete) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (complete) {
    s.dir = dir;
    s.saved = step;
    s.has_pending = false;
  } else {
    s.pending_dir = dir;
    s.pending = step;
    s.has_pending = true;
  }
}

void step_done() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.has_pending) return;
  s.dir = s.pending_dir;
  s.saved = s.pending;
  s.has_pending = false;
}

std::string describe() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.stepping && s.dir.empty()) return "";
  std::string out = "at step " + std::to_string(s.step + 1);
  if (s.dir.empty()) return out + "; no checkpoint was completed by this run";
  return out + "; resume from " + s.dir + " (its latest: step " + std::to_string(s.saved) +
         " or newer)";
}

void reset() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.stepping = s.has_pending = false;
  s.step = s.saved = s.pending = 0;
  s.dir.clear();
  s.pending_dir.clear();
}

}  // namespace strata::comm::progress
