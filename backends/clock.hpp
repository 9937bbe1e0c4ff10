// The one clock of Strata's timings (step times, calibration, benchmarks):
// monotonic, and seconds as a double.
//
//   const auto t0 = Clock::now();
//   ...
//   const double s = seconds_since(t0);
#pragma once

#include <chrono>

namespace strata {

using Clock = std::chrono::steady_clock;

inline double seconds(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

inline double seconds_since(Clock::time_point t0) { return seconds(t0, Clock::now()); }

}  // namespace strata
