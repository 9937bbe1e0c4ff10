// The elementwise activations' functions and derivatives, shared by the
// Activation layer and by layers that apply one inside their own kernels
// (FusedActivation, layers/capabilities.hpp) with the same bits.
#pragma once

#include "backends/vmath.hpp"

namespace strata {
namespace detail {

// Each functor gives f(x) and f'(x, y) for y = f(x); uses_x says which of
// the two f' reads (the other is passed as 0 and never loaded).
struct Relu {
  static constexpr bool uses_x = false;
  template <class T>
  KOKKOS_INLINE_FUNCTION static T f(T x) { return x > T(0) ? x : T(0); }
  // y > 0 exactly when x > 0 (also for -0 and NaN, which give y = 0).
  template <class T>
  KOKKOS_INLINE_FUNCTION static T df(T, T y) { return y > T(0) ? T(1) : T(0); }
};
struct Gelu {
  static constexpr bool uses_x = true;
  // 0.5 x (1 + erf(x / sqrt 2)); derivative Phi(x) + x phi(x). vmath's
  // erf and exp: the loops vectorise (libm's stay scalar).
  template <class T>
  KOKKOS_INLINE_FUNCTION static T f(T x) {
    return T(0.5) * x * (T(1) + vmath::erf(x * T(0.70710678118654752440)));
  }
  template <class T>
  KOKKOS_INLINE_FUNCTION static T df(T x, T) {
    const T cdf = T(0.5) * (T(1) + vmath::erf(x * T(0.70710678118654752440)));
    const T pdf = T(0.39894228040143267794) * vmath::exp(T(-0.5) * x * x);
    return cdf + x * pdf;
  }
};
struct Tanh {
  static constexpr bool uses_x = false;
  template <class T>
  KOKKOS_INLINE_FUNCTION static T f(T x) { return vmath::tanh(x); }
  template <class T>
  KOKKOS_INLINE_FUNCTION static T df(T, T y) { return T(1) - y * y; }
};
struct Sigmoid {
  static constexpr bool uses_x = false;
  template <class T>
  KOKKOS_INLINE_FUNCTION static T f(T x) { return T(1) / (T(1) + vmath::exp(-x)); }
  template <class T>
  KOKKOS_INLINE_FUNCTION static T df(T, T y) { return y * (T(1) - y); }
};

}  // namespace detail
}  // namespace strata
