// 16-bit floating-point storage types for mixed precision: bf16 (bfloat16:
// 1 sign, 8 exponent, 7 mantissa bits) and fp16 (IEEE binary16: 1, 5, 10).
//
// They are storage types: arithmetic happens in float after conversion.
// Conversions round to nearest, ties to even; Inf and NaN are kept (a NaN
// stays a NaN of the same sign, quieted); fp16 has subnormals (down to 2^-24)
// and overflows to Inf from 65520 on. Everything is KOKKOS_INLINE_FUNCTION
// and uses no std:: function, so it runs in kernels on every backend and
// every Kokkos version (Kokkos::Experimental::half_t/bhalf_t are not used:
// they exist only in some versions and configurations).
//
// Flat-buffer conversion kernels: convert(ctx.exec, from, to) for float <->
// bf16/fp16 Views of equal length in MemSpace.
#pragma once

#include "backends/error.hpp"
#include "backends/kokkos.hpp"

#include <cstdint>
#include <string>
#include <type_traits>

namespace strata {

namespace detail {
// Bit casts through a union: supported by GCC, Clang, NVCC and HIP in device
// and host code (memcpy/std::bit_cast are not usable on every backend).
KOKKOS_INLINE_FUNCTION std::uint32_t float_bits(float f) {
  union {
    float f;
    std::uint32_t u;
  } v{f};
  return v.u;
}
KOKKOS_INLINE_FUNCTION float bits_float(std::uint32_t u) {
  union {
    std::uint32_t u;
    float f;
  } v{u};
  return v.f;
}

KOKKOS_INLINE_FUNCTION std::uint16_t float_to_bf16_bits(float f) {
  const std::uint32_t u = float_bits(f);
  // NaN: keep sign and the top payload bits, set the quiet bit.
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  // Round to nearest even on the 16 dropped bits; a carry into the exponent
  // is the right result (up to Inf for values past the largest bf16).
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
KOKKOS_INLINE_FUNCTION float bf16_bits_to_float(std::uint16_t b) {
  return bits_float(static_cast<std::uint32_t>(b) << 16);
}

KOKKOS_INLINE_FUNCTION std::uint16_t float_to_fp16_bits(float f) {
  const std::uint32_t u = float_bits(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u)  // NaN: quiet, top payload bits kept
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520: Inf
  if (a < 0x38800000u) {  // below 2^-14: subnormal (or zero) result
    if (a <= 0x33000000u) return static_cast<std::uint16_t>(sign);  // <= 2^-25: rounds to 0
    const std::uint32_t e = a >> 23;                // 102..112
    const std::uint32_t m = (a & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - e;           // value * 2^24 = m >> shift: 14..24
    std::uint32_t r = m >> shift;
    const std::uint32_t rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rest > half || (rest == half && (r & 1u))) ++r;  // 0x400: the smallest normal
    return static_cast<std::uint16_t>(sign | r);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits.
  const std::uint32_t t = a + 0xfffu + ((a >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | ((t >> 13) - (112u << 10)));
}
KOKKOS_INLINE_FUNCTION float fp16_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1fu) return bits_float(sign | 0x7f800000u | (m << 13));  // Inf, NaN
  if (e == 0) {  // zero or subnormal: m * 2^-24, exact in float
    const float v = static_cast<float>(m) * 5.9604644775390625e-8f;
    return bits_float(sign | float_bits(v));
  }
  return bits_float(sign | ((e + 112u) << 23) | (m << 13));
}
}  // namespace detail

// bfloat16 storage.
struct bf16 {
  std::uint16_t bits;

  bf16() = default;
  KOKKOS_INLINE_FUNCTION explicit bf16(float f) : bits(detail::float_to_bf16_bits(f)) {}
  KOKKOS_INLINE_FUNCTION operator float() const { return detail::bf16_bits_to_float(bits); }
  KOKKOS_INLINE_FUNCTION static bf16 from_bits(std::uint16_t b) {
    bf16 v;
    v.bits = b;
    return v;
  }
};

// IEEE binary16 storage.
struct fp16 {
  std::uint16_t bits;

  fp16() = default;
  KOKKOS_INLINE_FUNCTION explicit fp16(float f) : bits(detail::float_to_fp16_bits(f)) {}
  KOKKOS_INLINE_FUNCTION operator float() const { return detail::fp16_bits_to_float(bits); }
  KOKKOS_INLINE_FUNCTION static fp16 from_bits(std::uint16_t b) {
    fp16 v;
    v.bits = b;
    return v;
  }
};

static_assert(sizeof(bf16) == 2 && sizeof(fp16) == 2, "16-bit storage types");

// The storage precision of a tensor or a training run.
enum class Precision { fp32, bf16, fp16 };
Precision parse_precision(const std::string& name);  // throws config naming `name`
const char* to_string(Precision p);
inline std::size_t bytes_of(Precision p) { return p == Precision::fp32 ? 4 : 2; }

// Rounds a float to the nearest value of the 16-bit type, as a float (the
// value a 16-bit store and load would give).
template <class L>
KOKKOS_INLINE_FUNCTION float round_to(float f) {
  return static_cast<float>(L(f));
}

// to(i) = from(i) converted (rounded to nearest even when narrowing).
// Launched on exec; both Views in MemSpace, of equal length.
template <class From, class To>
void convert(const ExecSpace& exec, ConstVector<From> from, Vector<To> to) {
  STRATA_REQUIRE(from.extent(0) == to.extent(0), config, "convert: ", from.extent(0),
                 " elements into a buffer of ", to.extent(0));
  Kokkos::parallel_for("strata::convert", Range(exec, 0, from.extent(0)),
                       KOKKOS_LAMBDA(const std::size_t i) { to(i) = To(static_cast<float>(from(i))); });
}

// x(i) = round_to<L>(x(i)) in place: float buffers holding 16-bit values
// (working weights, emulated activation storage; see docs/mixed-precision.md).
template <class L>
void round_in_place(const ExecSpace& exec, Vector<float> x) {
  Kokkos::parallel_for("strata::round_in_place", Range(exec, 0, x.extent(0)),
                       KOKKOS_LAMBDA(const std::size_t i) { x(i) = round_to<L>(x(i)); });
}
// Runtime choice of L (fp32: nothing to do).
void round_in_place(const ExecSpace& exec, Precision p, Vector<float> x);

// Rounds the activations of a model computing in T to the storage precision
// p, in place: for float models with a 16-bit p; nothing otherwise.
template <class T>
void round_activations(const ExecSpace& exec, Precision p, T* data, std::size_t n) {
  if constexpr (std::is_same_v<T, float>) {
    if (p != Precision::fp32) round_in_place(exec, p, Vector<float>(data, n));
  } else {
    (void)exec, (void)p, (void)data, (void)n;
  }
}

}  // namespace strata
