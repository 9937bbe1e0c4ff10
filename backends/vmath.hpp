// Float exp, tanh and erf that compilers vectorise.
//
// A loop calling libm's expf/tanhf stays scalar (glibc's vector versions are
// only declared under -ffast-math), which made Tanh and Sigmoid 20-50x slower
// than ReLU on host threads. These are polynomials and selects without
// branches, calls or tables, so a host loop becomes SIMD code; on GPUs they
// are plain arithmetic too, and every backend computes the same values from
// the same formulas.
//
// erf is one rational function x P(x^2) / Q(x^2) on |x| <= 4 (erf rounds to
// 1 beyond 3.92): no exp, no branch, so GELU's loops vectorise (glibc's erff
// stays scalar and made GELU 13% of a gpt-mini block's time).
//
// Accuracy (float evaluation, against mpmath; scripts/fit-vmath.py derives
// the coefficients and checks these bounds; VMath.* in tests/layers/test_layers.cpp
// checks them against double-precision libm):
//   exp   1.35 ulp (1.32 over all 2^32 floats); x > 88.72 gives +inf, x < -103.9 gives 0, subnormal results
//         are rounded from a normal intermediate
//   tanh  1.5 ulp (1.35 over all 2^32 floats)
//   erf   6.6 ulp (6.52 over every float of [3, 4], where erf is near 1
//         and the float Horner sums of P and Q err most; there they could
//         give 1 + 2^-23, so the result is clamped to 1); |erf| <= 1,
//         erf(+-4 and beyond) = +-1 exactly. Not monotonic to the last bit.
// NaN in, NaN out; tanh(-0) = -0. Double arguments use
// the Kokkos (libm) functions.
#pragma once

#include "backends/kokkos.hpp"
#include "backends/precision.hpp"

#include <cstdint>

namespace strata::vmath {

namespace detail {
// Horner's rule, lowest-degree coefficient first: c0 + t (c1 + t (c2 + ...)).
// Variadic rather than a loop over an array, so that nothing is left for the
// vectoriser to unroll.
KOKKOS_INLINE_FUNCTION float poly(float, float c0) { return c0; }
template <class... C>
KOKKOS_INLINE_FUNCTION float poly(float t, float c0, C... c) {
  return poly(t, c...) * t + c0;
}
KOKKOS_INLINE_FUNCTION float copysign_of(float magnitude, float sign_of) {
  using strata::detail::bits_float;
  using strata::detail::float_bits;
  return bits_float((float_bits(magnitude) & 0x7fffffffu) | (float_bits(sign_of) & 0x80000000u));
}
}  // namespace detail

KOKKOS_INLINE_FUNCTION float exp(float x) {
  using strata::detail::bits_float;
  using strata::detail::float_bits;
  constexpr float log2e = 1.44269504088896341f;
  constexpr float ln2_hi = 0.693359375f;  // 8 significant bits: n * ln2_hi is exact
  constexpr float ln2_lo = -2.12194440e-4f;
  constexpr float magic = 12582912.0f;  // 1.5 * 2^23: x + magic rounds x to an integer
  // Clamp (a NaN becomes -104 here and is put back at the end); 88.8 gives
  // n = 128 and overflows to +inf below, -104 underflows to 0.
  float xc = x > -104.0f ? x : -104.0f;
  xc = xc < 88.8f ? xc : 88.8f;
  const float t = xc * log2e + magic;
  const float nf = t - magic;
  // t's low mantissa bits hold n (two's complement offset from the magic).
  const std::int32_t n = static_cast<std::int32_t>(float_bits(t) - float_bits(magic));
  const float r = (xc - nf * ln2_hi) - nf * ln2_lo;  // |r| <= ln2 / 2
  const float e = 1.0f + r + (r * r) * detail::poly(r, 0.5f, 0.16666577756404877f, 0.04166685417294502f,
                                                         0.008363140746951103f, 0.0013901280472055078f);
  // 2^n as two normal powers, n in [-150, 128]: (e * 2^n1) * 2^n2 rounds
  // subnormal results once and overflows to +inf above 88.72.
  const std::int32_t n1 = n >> 1, n2 = n - n1;
  const float s1 = bits_float(static_cast<std::uint32_t>(n1 + 127) << 23);
  const float s2 = bits_float(static_cast<std::uint32_t>(n2 + 127) << 23);
  const float y = (e * s1) * s2;
  return x == x ? y : x;
}

KOKKOS_INLINE_FUNCTION float tanh(float x) {
  // |x| < 0.625: x + x^3 P(x^2). Otherwise 1 - 2 / (exp(2|x|) + 1), with
  // exp(2|x|) = +inf giving exactly 1.
  // Computed on |x|, the sign put back last (tanh(-0) = -0).
  const float a = x < 0.0f ? -x : x;
  const float a2 = a * a;
  const float small = a + (a * a2) * detail::poly(a2, -0.333333283662796f, 0.13332770764827728f,
                                                  -0.05385100841522217f, 0.020997541025280952f,
                                                  -0.006097149103879929f);
  const float large = 1.0f - 2.0f / (exp(2.0f * a) + 1.0f);
  return detail::copysign_of(a < 0.625f ? small : large, x);
}

KOKKOS_INLINE_FUNCTION float erf(float x) {
  // |x| by its bits; the clamp keeps a NaN (the comparison is false), so
  // NaN in gives NaN out. Written as selects a compiler if-converts.
  float a = detail::copysign_of(x, 0.0f);
  a = a > 4.0f ? 4.0f : a;
  const float t = a * a;
  const float p = detail::poly(t, 1.1283791065216064f, 0.2071213722229004f, 0.051524363458156586f,
                               0.003990404307842255f, 0.00014728227688465267f,
                               -1.9422964214754757e-06f, 1.9110991900106455e-08f);
  const float q = detail::poly(t, 1.0f, 0.5168877840042114f, 0.11796913295984268f,
                               0.014957733452320099f, 0.0010210712207481265f);
  // At most 1: near x = 3.6 the float sums could round (a p) / q to 1 + 2^-23.
  float r = (a * p) / q;
  r = r > 1.0f ? 1.0f : r;
  return detail::copysign_of(r, x);
}

KOKKOS_INLINE_FUNCTION double exp(double x) { return kmath::exp(x); }
KOKKOS_INLINE_FUNCTION double erf(double x) { return kmath::erf(x); }
KOKKOS_INLINE_FUNCTION double tanh(double x) { return kmath::tanh(x); }

}  // namespace strata::vmath
