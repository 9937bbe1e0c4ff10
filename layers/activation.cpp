#include "layers/activation.hpp"

#include "backends/error.hpp"
#include "backends/launch.hpp"
#include "backends/vmath.hpp"

namespace strata {

ActivationKind parse_activation(const std::string& name) {
  for (ActivationKind k :
       {ActivationKind::relu, ActivationKind::gelu, ActivationKind::tanh, ActivationKind::sigmoid})
    if (name == to_string(k)) return k;
  STRATA_THROW(config, "unknown activation '", name, "' (expected relu, gelu, tanh or sigmoid)");
}

const char* to_string(ActivationKind kind) {
  switch (kind) {
    case ActivationKind::relu: return "relu";
    case ActivationKind::gelu: return "gelu";
    case ActivationKind::tanh: return "tanh";
    case ActivationKind::sigmoid: return "sigmoid";
  }
  return "?";
}

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

template <class F, class T>
void apply_forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y) {
  const std::size_t cols = x.extent(1);
  const T* xp = x.data();
  T* yp = y.data();
  // Rows are contiguous, so the matrix is one flat range.
  for_range(ctx, "strata::Activation::forward", x.extent(0) * cols,
                       KOKKOS_LAMBDA(const std::size_t i) { yp[i] = F::f(xp[i]); });
}

// v: the saved x or y, whichever F::df reads.
template <class F, class T>
void apply_backward(Context& ctx, ConstMatrix<T> v, ConstMatrix<T> dy, Matrix<T> dx) {
  const T* vp = v.data();
  const T* dyp = dy.data();
  T* dxp = dx.data();
  for_range(ctx, "strata::Activation::backward", dy.extent(0) * dy.extent(1),
            KOKKOS_LAMBDA(const std::size_t i) {
              dxp[i] = dyp[i] * (F::uses_x ? F::df(vp[i], T(0)) : F::df(T(0), vp[i]));
            });
}

}  // namespace detail

template <class T>
std::string Activation<T>::name() const {
  switch (kind_) {
    case ActivationKind::relu: return "ReLU";
    case ActivationKind::gelu: return "GELU";
    case ActivationKind::tanh: return "Tanh";
    case ActivationKind::sigmoid: return "Sigmoid";
  }
  return "?";
}

template <class T>
void Activation<T>::forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>&) {
  switch (kind_) {
    case ActivationKind::relu: detail::apply_forward<detail::Relu>(ctx, x, y); break;
    case ActivationKind::gelu: detail::apply_forward<detail::Gelu>(ctx, x, y); break;
    case ActivationKind::tanh: detail::apply_forward<detail::Tanh>(ctx, x, y); break;
    case ActivationKind::sigmoid: detail::apply_forward<detail::Sigmoid>(ctx, x, y); break;
  }
}

template <class T>
void Activation<T>::backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>& saved) {
  if (dx.data() == nullptr) return;
  const auto y = saved.y;
  switch (kind_) {
    case ActivationKind::relu: detail::apply_backward<detail::Relu>(ctx, y, dy, dx); break;
    case ActivationKind::gelu:
      detail::apply_backward<detail::Gelu>(ctx, saved.x, dy, dx);
      break;
    case ActivationKind::tanh: detail::apply_backward<detail::Tanh>(ctx, y, dy, dx); break;
    case ActivationKind::sigmoid: detail::apply_backward<detail::Sigmoid>(ctx, y, dy, dx); break;
  }
}

template class Activation<float>;
template class Activation<double>;

}  // namespace strata
