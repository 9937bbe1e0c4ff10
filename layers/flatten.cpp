#include "layers/flatten.hpp"

#include "backends/launch.hpp"
#include "layers/registry.hpp"

namespace strata {

namespace {
template <class T>
void copy(Context& ctx, const char* name, ConstMatrix<T> from, Matrix<T> to) {
  const T* src = from.data();
  T* dst = to.data();
  for_range(ctx, name, from.size(), KOKKOS_LAMBDA(const std::size_t i) { dst[i] = src[i]; });
}
}  // namespace

template <class T>
LayerPtr<T> Flatten<T>::from_args(LayerArgs&, const Shape&, LayerBuild&) {
  return std::make_unique<Flatten<T>>();
}

template <class T>
void Flatten<T>::forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>&) {
  copy<T>(ctx, "strata::Flatten::forward", x, y);
}

template <class T>
void Flatten<T>::backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>&) {
  if (dx.data() != nullptr) copy<T>(ctx, "strata::Flatten::backward", dy, dx);
}

template class Flatten<float>;
template class Flatten<double>;

}  // namespace strata
