#include "layers/layernorm.hpp"

#include "backends/error.hpp"
#include "backends/launch.hpp"
#include "backends/segment_sums.hpp"
#include "layers/batch_sums.hpp"
#include "layers/registry.hpp"

namespace strata {

namespace {
// What the elementwise kernels share per row: its mean and rstd (and, in
// backward, the means of dxhat and dxhat xhat).
template <class T>
struct LayerNormRow {
  T mu, r, s1, s2;
};
}  // namespace

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
void LayerNorm<T>::bind(Vector<T> params, Vector<T> grads) {
  const auto s = this->slices(params, grads);
  gamma_ = s[0].value;
  dgamma_ = s[0].grad;
  beta_ = s[1].value;
  dbeta_ = s[1].grad;
}

template <class T>
void LayerNorm<T>::forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>& saved) {
  x = as_rows(x, features_);
  y = as_rows(y, features_);
  const std::size_t batch = x.extent(0);
  STRATA_REQUIRE(saved.scratch.extent(0) >= 2 * batch, runtime, name(), ": ",
                 saved.scratch.extent(0), " saved values for a micro-batch of ", batch, " rows");
  const std::size_t n = features_;
  const double eps = eps_, nd = static_cast<double>(n);
  Vector<T> mean(saved.scratch.data(), batch), rstd(saved.scratch.data() + batch, batch);
  auto gamma = gamma_, beta = beta_;
  // Each row's mean, then its variance from the squared deviations (two
  // passes, as the variance of values far from zero needs), in double and
  // two-stage (backends/segment_sums.hpp: rows x partials items, not one
  // item per row); then the elementwise normalisation (rows x features).
  const std::size_t partials = segment_sums_workspace(batch, n, 1);
  double* work = sums_workspace(ctx, partials + batch);
  double* mu = work + partials;
  segment_sums<1>(ctx, "strata::LayerNorm::sum_partials", "strata::LayerNorm::means",
      Terms::contiguous, batch, 1, n, work,
      KOKKOS_LAMBDA(std::size_t i, std::size_t, std::size_t j, double* acc) {
        acc[0] += static_cast<double>(x(i, j));
      },
      KOKKOS_LAMBDA(std::size_t i, const double* t) { mu[i] = t[0] / nd; });
  segment_sums<1>(ctx, "strata::LayerNorm::square_partials", "strata::LayerNorm::statistics",
      Terms::contiguous, batch, 1, n, work,
      KOKKOS_LAMBDA(std::size_t i, std::size_t, std::size_t j, double* acc) {
        const double d = static_cast<double>(x(i, j)) - mu[i];
        acc[0] += d * d;
      },
      KOKKOS_LAMBDA(std::size_t i, const double* t) {
        mean(i) = static_cast<T>(mu[i]);
        rstd(i) = static_cast<T>(1.0 / kmath::sqrt(t[0] / nd + eps));
      });
  for_elements(ctx, "strata::LayerNorm::forward", batch, n,
      KOKKOS_LAMBDA(const std::size_t i) { return LayerNormRow<T>{mean(i), rstd(i), 0, 0}; },
      KOKKOS_LAMBDA(const LayerNormRow<T>& w, const std::size_t i, const std::size_t j) {
        y(i, j) = (x(i, j) - w.mu) * w.r * gamma(j) + beta(j);
      });
}

template <class T>
void LayerNorm<T>::backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>& saved) {
  const auto x = as_rows(saved.x, features_);
  dy = as_rows(dy, features_);
  if (dx.data() != nullptr) dx = as_rows(dx, features_);
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
    // Parameter gradients: per feature, the rows' terms summed in double,
    // two-stage (backends/segment_sums.hpp; one item per feature left a GPU
    // idle, and B T rows of floats added in float drift).
    const std::size_t rows = dy.extent(0), features = features_;
    double* work = sums_workspace(ctx, segment_sums_workspace(features, rows, 2));
    segment_sums<2>(ctx, "strata::LayerNorm::param_grad_partials", "strata::LayerNorm::param_grad",
        Terms::interleaved, features, rows, 1, work,
        KOKKOS_LAMBDA(std::size_t j, std::size_t i, std::size_t, double* acc) {
          const double d = static_cast<double>(dy(i, j));
          acc[0] += d * ((static_cast<double>(x(i, j)) - static_cast<double>(mean(i))) *
                         static_cast<double>(rstd(i)));
          acc[1] += d;
        },
        KOKKOS_LAMBDA(std::size_t j, const double* total) {
          dgamma(j) += static_cast<T>(total[0]);
          dbeta(j) += static_cast<T>(total[1]);
        });
  }
  if (dx.data() == nullptr) return;
  // Per row, the means of dxhat = dy gamma and of dxhat xhat in double
  // (two-stage), then dx elementwise.
  const std::size_t rows = dy.extent(0), features = features_;
  const std::size_t partials = segment_sums_workspace(rows, features, 2);
  double* work = sums_workspace(ctx, partials + 2 * rows);
  double* means = work + partials;
  const double nd = static_cast<double>(features);
  segment_sums<2>(ctx, "strata::LayerNorm::input_grad_partials", "strata::LayerNorm::input_grad_sums",
      Terms::contiguous, rows, 1, features, work,
      KOKKOS_LAMBDA(std::size_t i, std::size_t, std::size_t j, double* acc) {
        const double g = static_cast<double>(dy(i, j) * gamma(j));
        acc[0] += g;
        acc[1] += g * static_cast<double>((x(i, j) - mean(i)) * rstd(i));
      },
      KOKKOS_LAMBDA(std::size_t i, const double* t) {
        means[2 * i] = t[0] / nd;
        means[2 * i + 1] = t[1] / nd;
      });
  for_elements(ctx, "strata::LayerNorm::input_grad", rows, features,
      KOKKOS_LAMBDA(const std::size_t i) {
        return LayerNormRow<T>{mean(i), rstd(i), static_cast<T>(means[2 * i]),
                               static_cast<T>(means[2 * i + 1])};
      },
      KOKKOS_LAMBDA(const LayerNormRow<T>& w, const std::size_t i, const std::size_t j) {
        const T xhat = (x(i, j) - w.mu) * w.r;
        dx(i, j) = w.r * (dy(i, j) * gamma(j) - w.s1 - xhat * w.s2);
      });
}

template class LayerNorm<float>;
template class LayerNorm<double>;

}  // namespace strata
