#include "layers/dropout.hpp"

#include "backends/error.hpp"
#include "backends/random.hpp"

namespace strata {

template <class T>
Dropout<T>::Dropout(double p, std::uint64_t seed)
    : p_(p), seed_(random::mix64(seed ^ random::stream_dropout)) {
  STRATA_REQUIRE(p >= 0.0 && p < 1.0, config, "Dropout: probability must be in [0, 1), got ",
                 p);
}

template <class T>
std::string Dropout<T>::name() const {
  return "Dropout(" + std::to_string(p_) + ")";
}

namespace detail {
// y = x * mask / (1 - p) with mask from (seed, call, i); also used for dx.
// `first` is the global index of element 0 (row offset x columns).
template <class T>
void dropout_apply(Context& ctx, const char* label, const T* in, T* out, std::size_t n,
                   std::size_t first, std::uint64_t seed, std::uint64_t call, double p) {
  const float threshold = static_cast<float>(p);
  const T scale = static_cast<T>(1.0 / (1.0 - p));
  Kokkos::parallel_for(label, Range(ctx.exec, 0, n), KOKKOS_LAMBDA(const std::size_t i) {
    const bool keep = random::uniform_float(seed, call, first + i) >= threshold;
    out[i] = keep ? in[i] * scale : T(0);
  });
}
}  // namespace detail

template <class T>
void Dropout<T>::forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y) {
  last_was_training_ = this->training_ && p_ > 0.0;
  if (!last_was_training_) {
    Kokkos::deep_copy(ctx.exec, y, x);
    return;
  }
  ++calls_;
  detail::dropout_apply(ctx, "strata::Dropout::forward", x.data(), y.data(),
                        x.extent(0) * x.extent(1), row_offset_ * x.extent(1), seed_, calls_, p_);
}

template <class T>
void Dropout<T>::backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx) {
  if (dx.data() == nullptr) return;
  if (!last_was_training_) {
    if (dx.data() != dy.data()) Kokkos::deep_copy(ctx.exec, dx, dy);
    return;
  }
  detail::dropout_apply(ctx, "strata::Dropout::backward", dy.data(), dx.data(),
                        dy.extent(0) * dy.extent(1), row_offset_ * dy.extent(1), seed_, calls_, p_);
}

template class Dropout<float>;
template class Dropout<double>;

}  // namespace strata
