// The Kokkos types every layer and strategy uses, and the small shims that let
// one source compile against Kokkos 3.4 through 5.x.
//
// Strata is compiled for one Kokkos configuration: kernels run on
// Kokkos::DefaultExecutionSpace (OpenMP/Threads/Serial on the host, CUDA, HIP).
// Host-side staging uses Kokkos::DefaultHostExecutionSpace.
#pragma once

#include "backends/floating_point.hpp"  // refuses the -ffast-math family

#include <Kokkos_Core.hpp>

#include <cmath>
#include <cstdint>

namespace strata {

using ExecSpace = Kokkos::DefaultExecutionSpace;
using MemSpace = ExecSpace::memory_space;
using HostExecSpace = Kokkos::DefaultHostExecutionSpace;

// Unmanaged Views are what layers and kernels take: owners (Sequential, the
// optimizers, datasets) keep managed Views, and a managed View converts
// implicitly. No reference counting happens on the training path.
using Unmanaged = Kokkos::MemoryTraits<Kokkos::Unmanaged>;

// A batch of activations: (batch, features), row-major, device memory.
template <class T>
using Matrix = Kokkos::View<T**, Kokkos::LayoutRight, MemSpace, Unmanaged>;
template <class T>
using ConstMatrix = Kokkos::View<const T**, Kokkos::LayoutRight, MemSpace, Unmanaged>;
template <class T>
using Vector = Kokkos::View<T*, Kokkos::LayoutRight, MemSpace, Unmanaged>;
template <class T>
using ConstVector = Kokkos::View<const T*, Kokkos::LayoutRight, MemSpace, Unmanaged>;

// Owning (reference-counted) device buffers.
template <class T>
using MatrixBuffer = Kokkos::View<T**, Kokkos::LayoutRight, MemSpace>;
template <class T>
using VectorBuffer = Kokkos::View<T*, Kokkos::LayoutRight, MemSpace>;

// Class labels of a batch: (batch), device memory.
using Labels = Kokkos::View<const std::int32_t*, Kokkos::LayoutRight, MemSpace, Unmanaged>;
using LabelsBuffer = Kokkos::View<std::int32_t*, Kokkos::LayoutRight, MemSpace>;

using Range = Kokkos::RangePolicy<ExecSpace>;
using Range2D = Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>;

// First `rows` rows of a row-major matrix (a contiguous block).
template <class View>
KOKKOS_INLINE_FUNCTION auto head_rows(const View& m, std::size_t rows) {
  return Kokkos::subview(m, Kokkos::make_pair(std::size_t(0), rows), Kokkos::ALL);
}

// Views a slice of a flat buffer as a (rows, cols) row-major matrix.
template <class T>
Matrix<T> reshape(const Vector<T>& flat, std::size_t offset, std::size_t rows,
                  std::size_t cols) {
  return Matrix<T>(flat.data() + offset, rows, cols);
}

// Views a (batch, P * width) row-major matrix as (batch * P, width): the
// positions of a shaped activation as rows (layers acting on the last dimension).
template <class M>
M as_rows(const M& m, std::size_t width) {
  return M(m.data(), m.extent(0) * (m.extent(1) / width), width);
}

}  // namespace strata

// Mathematical functions usable in kernels: Kokkos::Experimental:: in 3.4-3.6,
// Kokkos:: from 3.7 on (the Experimental names are gone in 4.x).
namespace strata::kmath {
#if KOKKOS_VERSION >= 30700
using Kokkos::erf;
using Kokkos::exp;
using Kokkos::fabs;
using Kokkos::fma;
using Kokkos::log;
using Kokkos::pow;
using Kokkos::sqrt;
using Kokkos::tanh;
#else
using Kokkos::Experimental::erf;
using Kokkos::Experimental::exp;
using Kokkos::Experimental::fabs;
using Kokkos::Experimental::log;
using Kokkos::Experimental::pow;
using Kokkos::Experimental::sqrt;
using Kokkos::Experimental::tanh;
// fma(a, b, c) = a * b + c rounded once (3.4 has no Kokkos fma; the C
// library's is a device function on CUDA and HIP too).
KOKKOS_INLINE_FUNCTION float fma(float a, float b, float c) { return ::fmaf(a, b, c); }
KOKKOS_INLINE_FUNCTION double fma(double a, double b, double c) { return ::fma(a, b, c); }
#endif
}  // namespace strata::kmath
