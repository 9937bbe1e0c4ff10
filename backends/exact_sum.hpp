// Order-independent sums: the arithmetic under --reproducible.
//
// A floating-point sum depends on the order of its terms, so a sum split over
// ranks or threads changes in the last bits with their number. Here every
// term is first split on a FIXED grid into two doubles,
//   hi: x rounded to a multiple of 2^-20        (|x| < 2^24)
//   lo: the rest, rounded to a multiple of 2^-54
// and the his and the los are added separately. Sums of multiples of 2^-20
// below 2^33 and of multiples of 2^-54 below 2^-1 are exact in double, so
// they do not depend on the order, the grouping, the thread or rank count or
// the transport (an MPI, NCCL or shared-memory allreduce of the doubles is
// exact too). The result, hi + lo rounded once, is the same on any layout.
//
// What is kept: every bit of x above 2^-54 (about 5.6e-17, below which a
// term's bits are rounded away: absolute, not relative). Limits: a term of
// magnitude 2^24 or more (or not finite) makes a gradient's sum NaN (a
// scalar ExactSum keeps such terms apart instead, see below); the sum stays
// exact while the magnitudes of the terms add up to less than 2^33 (8.6e9)
// and there are at most 2^20 terms; a result of 2^32 or more reads as NaN
// (a sum that outgrew the grid). Gradients (scaled by 1 / batch), losses
// and normalisation statistics (terms scaled by 1 / count) are far inside.
//
// Cost: a split is six additions; the storage two doubles per value (16
// bytes against 4 for a float), which is also what an allreduce of it moves.
#pragma once

#include "backends/kokkos.hpp"

#include <cstddef>
#include <limits>

namespace strata {

namespace exact {
// Magnitudes a term must stay below, and a result.
inline constexpr double term_limit = 16777216.0;      // 2^24
inline constexpr double result_limit = 4294967296.0;  // 2^32
// x + c_hi - c_hi rounds |x| < 2^31 to a multiple of 2^-20: c_hi = 1.5 * 2^32
// lies where doubles are 2^-20 apart. Likewise c_lo = 1.5 * 2^-2 for 2^-54.
inline constexpr double c_hi = 6442450944.0;
inline constexpr double c_lo = 0.375;
inline constexpr double nan = std::numeric_limits<double>::quiet_NaN();
}  // namespace exact

// hi and lo of x (see above). Plain additions: compiled without
// -ffast-math (which would fold (x + c) - c into x), as Strata is.
KOKKOS_INLINE_FUNCTION void exact_split(double x, double& hi, double& lo) {
  const double ax = x < 0 ? -x : x;
  if (!(ax < exact::term_limit)) {  // too large, Inf or NaN
    hi = exact::nan;
    lo = 0;
    return;
  }
  const double h = (x + exact::c_hi) - exact::c_hi;
  const double r = x - h;  // exact: |r| <= 2^-21
  hi = h;
  lo = (r + exact::c_lo) - exact::c_lo;
}

// The sum hi + lo, NaN when it outgrew the grid.
KOKKOS_INLINE_FUNCTION double exact_value(double hi, double lo) {
  const double ah = hi < 0 ? -hi : hi;
  if (!(ah < exact::result_limit)) return exact::nan;
  return hi + lo;
}

// One exact sum of scalars (a loss). Unlike a gradient's pair, a term too
// large for the grid (a diverging loss) does not make it NaN: such terms
// (and Inf, NaN) add up in `big`, a plain double sum, so the value stays
// what it is, without the guarantee on its last bits.
struct ExactSum {
  double hi = 0, lo = 0, big = 0;

  KOKKOS_DEFAULTED_FUNCTION ExactSum() = default;
  KOKKOS_INLINE_FUNCTION void add(double x) {
    const double ax = x < 0 ? -x : x;
    if (!(ax < exact::term_limit)) {
      big += x;
      return;
    }
    double h, l;
    exact_split(x, h, l);
    hi += h;
    lo += l;
  }
  KOKKOS_INLINE_FUNCTION ExactSum& operator+=(const ExactSum& o) {
    hi += o.hi;
    lo += o.lo;
    big += o.big;
    return *this;
  }
  // Kokkos reductions join through volatile references in 3.x.
  KOKKOS_INLINE_FUNCTION void operator+=(const volatile ExactSum& o) volatile {
    hi += o.hi;
    lo += o.lo;
    big += o.big;
  }
  // Exact while the terms stay below 2^24 and their sum below 2^32.
  KOKKOS_INLINE_FUNCTION double value() const { return big + (hi + lo); }
};

// Adds term x to the exact pair at p[0], p[1] (a value of an exact buffer:
// two doubles per value, hi then lo).
KOKKOS_INLINE_FUNCTION void exact_add(double* p, double x) {
  double h, l;
  exact_split(x, h, l);
  p[0] += h;
  p[1] += l;
}

}  // namespace strata

namespace Kokkos {
// ExactSum in Kokkos::parallel_reduce (Sum): starts at zero.
template <>
struct reduction_identity<strata::ExactSum> {
  KOKKOS_FORCEINLINE_FUNCTION static strata::ExactSum sum() { return strata::ExactSum(); }
};
}  // namespace Kokkos
