#include "layers/layernorm.hpp"

#include "backends/error.hpp"
#include "backends/launch.hpp"
#include "layers/batch_sums.hpp"
#include "layers/registry.hpp"

namespace strata {

template <class T>
LayerNorm<T>::LayerNorm(std::size_t features, double eps) : features_(features), eps_(eps) {
  STRATA_REQUIRE(features > 0, config, "LayerNorm: features must be positive");
  STRATA_REQUIRE(eps > 0, config, "LayerNorm: eps must be positive, got ", eps);
}

template <class T>
LayerPtr<T> LayerNorm<T>::from_args(LayerArgs& args, const Shape& in, LayerBuild&) {
  return std::make_unique<LayerNorm<T>>(in.back(), args.number("eps", 1e-5));
}

template <class T>
std::string LayerNorm<T>::name() const {
  return "LayerNorm(" + std::to_string(features_) + ")";
}

template <class T>
Shape LayerNorm<T>::output_shape(const Shape& in) const {
  STRATA_REQUIRE(in.back() == features_, config, name(), " expects inputs whose last dimension is ",
                 features_, " but gets shape ", in.str());
  return in;
}

template <class T>
std::vector<ParamInfo> LayerNorm<T>::param_table() const {
  return {{"weight", Shape{features_}, 0, ParamGroup::no_decay},
          {"bias", Shape{features_}, features_, ParamGroup::no_decay}};
}

template <class T>
void LayerNorm<T>::bind(Vector<T> params, Vector<T> grads) {
  const auto g = Kokkos::make_pair(std::size_t(0), features_);
  const auto b = Kokkos::make_pair(features_, 2 * features_);
  gamma_ = Kokkos::subview(params, g);
  beta_ = Kokkos::subview(params, b);
  dgamma_ = Kokkos::subview(grads, g);
  dbeta_ = Kokkos::subview(grads, b);
}

template <class T>
void LayerNorm<T>::init(HostVector<T> params, Init, std::uint64_t, std::uint64_t) const {
  for (std::size_t i = 0; i < features_; ++i) {
    params(i) = T(1);
    params(features_ + i) = T(0);
  }
}

template <class T>
void LayerNorm<T>::forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>& saved) {
  x = as_rows(x, features_);
  y = as_rows(y, features_);
  const std::size_t batch = x.extent(0);
  STRATA_REQUIRE(saved.scratch.extent(0) >= 2 * batch, runtime, name(), ": ",
                 saved.scratch.extent(0), " saved values for a micro-batch of ", batch, " rows");
  const int n = static_cast<int>(features_);
  const T eps = static_cast<T>(eps_);
  Vector<T> mean(saved.scratch.data(), batch), rstd(saved.scratch.data() + batch, batch);
  auto gamma = gamma_, beta = beta_;
  for_range(ctx, "strata::LayerNorm::forward", batch,
                       KOKKOS_LAMBDA(const int i) {
                         T sum = 0;
                         for (int j = 0; j < n; ++j) sum += x(i, j);
                         const T mu = sum / T(n);
                         T var = 0;
                         for (int j = 0; j < n; ++j) var += (x(i, j) - mu) * (x(i, j) - mu);
                         const T r = T(1) / kmath::sqrt(var / T(n) + eps);
                         mean(i) = mu;
                         rstd(i) = r;
                         for (int j = 0; j < n; ++j)
                           y(i, j) = (x(i, j) - mu) * r * gamma(j) + beta(j);
                       },
            3 * n);
}

template <class T>
void LayerNorm<T>::backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>& saved) {
  const auto x = as_rows(saved.x, features_);
  dy = as_rows(dy, features_);
  if (dx.data() != nullptr) dx = as_rows(dx, features_);
  const int batch = static_cast<int>(dy.extent(0));
  const int n = static_cast<int>(features_);
  ConstVector<T> mean(saved.scratch.data(), dy.extent(0)),
      rstd(saved.scratch.data() + dy.extent(0), dy.extent(0)), gamma = gamma_;
  auto dgamma = dgamma_, dbeta = dbeta_;
  if (ctx.exact != nullptr) {  // --reproducible: every row's term added exactly
    add_row_sums<T>(ctx, "strata::LayerNorm::dgamma", dy.extent(0), dgamma,
        KOKKOS_LAMBDA(const std::size_t i, const std::size_t j) {
          return dy(i, j) * (x(i, j) - mean(i)) * rstd(i);
        });
    add_row_sums<T>(ctx, "strata::LayerNorm::dbeta", dy.extent(0), dbeta,
        KOKKOS_LAMBDA(const std::size_t i, const std::size_t j) { return dy(i, j); });
  } else {
    // Parameter gradients: one thread per feature, rows summed in order.
    for_range(ctx, "strata::LayerNorm::param_grad", n,
                         KOKKOS_LAMBDA(const int j) {
                           T dg = 0, db = 0;
                           for (int i = 0; i < batch; ++i) {
                             dg += dy(i, j) * (x(i, j) - mean(i)) * rstd(i);
                             db += dy(i, j);
                           }
                           dgamma(j) += dg;
                           dbeta(j) += db;
                         },
              batch);
  }
  if (dx.data() == nullptr) return;
  for_range(ctx, "strata::LayerNorm::input_grad", batch,
                       KOKKOS_LAMBDA(const int i) {
                         T s1 = 0, s2 = 0;  // sums of dxhat and dxhat * xhat
                         for (int j = 0; j < n; ++j) {
                           const T g = dy(i, j) * gamma(j);
                           s1 += g;
                           s2 += g * (x(i, j) - mean(i)) * rstd(i);
                         }
                         s1 /= T(n);
                         s2 /= T(n);
                         for (int j = 0; j < n; ++j) {
                           const T xhat = (x(i, j) - mean(i)) * rstd(i);
                           dx(i, j) = rstd(i) * (dy(i, j) * gamma(j) - s1 - xhat * s2);
                         }
                       },
            2 * n);
}

template class LayerNorm<float>;
template class LayerNorm<double>;

}  // namespace strata
