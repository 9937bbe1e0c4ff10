// Helpers shared by Strata's tests: device <-> host copies and seeded data.
#pragma once

#include "backends/kokkos.hpp"
#include "backends/ranks.hpp"
#include "backends/random.hpp"

#include <cstdlib>
#include <string>
#include <vector>

namespace strata::test {

template <class T>
MatrixBuffer<T> to_device(const std::vector<T>& host, std::size_t rows, std::size_t cols) {
  MatrixBuffer<T> d("test::matrix", rows, cols);
  auto h = Kokkos::create_mirror_view(d);
  for (std::size_t i = 0; i < rows * cols; ++i) h.data()[i] = host[i];
  Kokkos::deep_copy(d, h);
  return d;
}

template <class T>
VectorBuffer<T> to_device(const std::vector<T>& host) {
  VectorBuffer<T> d("test::vector", host.size());
  auto h = Kokkos::create_mirror_view(d);
  for (std::size_t i = 0; i < host.size(); ++i) h(i) = host[i];
  Kokkos::deep_copy(d, h);
  return d;
}

template <class View>
std::vector<typename View::non_const_value_type> to_host(const View& v) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  std::vector<typename View::non_const_value_type> out(v.size());
  // Views here are contiguous (row-major, possibly unmanaged).
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = h.data()[i];
  return out;
}

// Seeded N(0, 1) values.
template <class T>
std::vector<T> randn(std::size_t n, std::uint64_t seed) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<T>(random::normal(seed, 77, i));
  return v;
}

// Runs a shell command, capturing stdout and stderr together.
struct CommandResult {
  int exit_code = -1;
  std::string output;
};
CommandResult run_command(const std::string& command);

}  // namespace strata::test

// First line of a test that runs Kokkos kernels on thread ranks: skips it,
// with the reason, on backends that cannot have them (Kokkos 3.x on a GPU,
// Serial-only Kokkos 3.x).
#define STRATA_SKIP_WITHOUT_THREAD_RANKS()                                   \
  do {                                                                      \
    const std::string strata_why_ = ::strata::thread_ranks_unavailable();   \
    if (!strata_why_.empty()) GTEST_SKIP() << strata_why_;                  \
  } while (0)
