// The shape of every kernel launch: name, items and time, recorded by the
// launch wrapper (backends/launch.hpp) while on, as a table. For shaping
// kernels for a GPU on a machine without one: a kernel whose work is a
// large share of a step but launches few items (one per channel, one per
// column) leaves most of a GPU's thousands of threads idle. Kokkos Tools
// callbacks carry names and times but no iteration counts.
//
//   kernel_shapes::start();          // strata-train --kernel-shapes FILE
//   ... steps ...
//   kernel_shapes::write(FILE);      // a Markdown table, largest time first
//
// While on, every launch is fenced before and after (so that its time is its
// own): the steps run slower, and the table's times are the kernels' own.
// Off, a launch pays one relaxed atomic load.
#pragma once

#include <atomic>
#include <cstddef>
#include <string>

namespace strata::kernel_shapes {

namespace detail {
inline std::atomic<bool> on{false};
}

inline bool enabled() { return detail::on.load(std::memory_order_relaxed); }
// Clears what was recorded and starts recording (and the wall clock).
void start();
void stop();
// One launch of `items` items (a host kernel: its items, whether it ran
// inline or in chunks) that took `seconds`.
void record(const char* name, std::size_t items, double seconds);
// The table: per name, launches, items per launch (min and max), total and
// mean time, share of the wall time since start(); then the launches under
// 16,384 items whose time is more than 1% of it.
std::string table();
// Writes table() to `path`; throws runtime naming the file when it cannot.
void write(const std::string& path);

}  // namespace strata::kernel_shapes
