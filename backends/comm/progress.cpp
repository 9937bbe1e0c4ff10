#include "backends/comm/progress.hpp"

#include <atomic>
#include <mutex>

namespace strata::comm::progress {
namespace {

// The step and whether a checkpoint is pending are atomics: set_step and
// step_done run every training step and take no lock on the way.
struct State {
  std::mutex mutex;
  std::atomic<bool> stepping{false};
  std::atomic<std::uint64_t> step{0};
  std::string dir;            // the newest complete checkpoint's folder ("" none)
  std::uint64_t saved = 0;    // and its step
  std::string pending_dir;    // written by another rank, not yet known complete
  std::uint64_t pending = 0;
  std::atomic<bool> has_pending{false};
};

State& state() {
  static State s;
  return s;
}

}  // namespace

void set_step(std::uint64_t step) {
  State& s = state();
  s.step.store(step, std::memory_order_relaxed);
  s.stepping.store(true, std::memory_order_relaxed);
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
  if (!s.has_pending.load(std::memory_order_acquire)) return;
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
  std::string out = "at step " + std::to_string(s.step.load() + 1);
  if (s.dir.empty()) return out + "; no checkpoint was completed by this run";
  return out + "; resume from " + s.dir + " (its latest: step " + std::to_string(s.saved) +
         " or newer)";
}

void reset() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.stepping = false;
  s.has_pending = false;
  s.step = 0;
  s.saved = s.pending = 0;
  s.dir.clear();
  s.pending_dir.clear();
}

}  // namespace strata::comm::progress
