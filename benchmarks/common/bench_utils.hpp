// Helpers shared by Strata's benchmark programs: statistics over repetitions
// (median with min-max), the build configuration line every report starts
// with, and the machine's own reference rates (memcpy, STREAM copy).
#pragma once

#include "backends/clock.hpp"
#include "backends/units.hpp"

#include <chrono>
#include <string>
#include <vector>

namespace strata::bench {

struct Stats {
  double median = 0, min = 0, max = 0;
  std::size_t n = 0;
  // True when max and min differ by more than 20% (a noisy measurement).
  bool noisy() const { return min > 0 && max / min > 1.2; }
};
Stats stats(std::vector<double> samples);
// "median [min-max]" with a trailing * when noisy, no decimals (rates).
std::string rate_text(const Stats& s);

// "Strata 0.1.0 (commit abc123), Kokkos 3.4.1 OpenMP (2 threads), GEMM OpenBLAS, g++ 12.2.0"
std::string configuration();


// Bandwidth in bytes/s (bytes read + bytes written) of copying `bytes` with
// `threads` threads (STREAM copy), best of `reps`.
double copy_bandwidth(std::size_t bytes, int threads, int reps = 5);

// Bandwidth in bytes/s of reading `bytes` (summing them) with `threads`
// threads, best of `reps`: a reference that no operation reading the same
// bytes can beat (no write, so no write-allocate question). The array is
// read `passes` times per repetition, so that a working set that fits in a
// cache is measured warm, as an operation repeated on the same buffers
// finds it.
double read_bandwidth(std::size_t bytes, int threads, int reps = 5, int passes = 1);

using strata::format_bytes;  // backends/units.hpp

}  // namespace strata::bench
