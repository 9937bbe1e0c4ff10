// Copies between a vector in the kernels' memory and a host std::vector
// (checkpoints, layouts, exports): one deep_copy through an unmanaged host
// view, nothing for an empty vector.
#pragma once

#include "backends/kokkos.hpp"

#include <vector>

namespace strata {

// copy_to_host<T>(v): v's values (any 1-D view of T in the kernels' memory).
template <class T, class View>
std::vector<T> copy_to_host(const View& v) {
  std::vector<T> out(v.size());
  if (!out.empty())
    Kokkos::deep_copy(Kokkos::View<T*, Kokkos::HostSpace, Unmanaged>(out.data(), out.size()), v);
  return out;
}

// v = in (the same length, or in empty).
template <class T>
void copy_from_host(const std::vector<T>& in, Vector<T> v) {
  if (!in.empty())
    Kokkos::deep_copy(v, Kokkos::View<const T*, Kokkos::HostSpace, Unmanaged>(in.data(), in.size()));
}

}  // namespace strata
