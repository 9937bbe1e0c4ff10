#include "layers/activation.hpp"

#include "backends/error.hpp"
#include "backends/launch.hpp"
#include "layers/activation_functions.hpp"

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
