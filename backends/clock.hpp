// The clock of Strata's reported timings (the engines' step times, the
// trainer, calibration, the apps and the benchmarks): monotonic, seconds as
// a double. (Deadlines and timeouts inside the communicators and the trace's
// and kernel-shape recorders' time points use std::chrono directly.)
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
