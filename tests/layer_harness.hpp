// Test harness for one layer: its own parameter and gradient buffers, a
// forward and backward on host vectors, and central finite differences in
// double precision for the input and parameter gradients.
#pragma once

#include "layers/layer.hpp"
#include "test_utils.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

namespace strata {
namespace test {

using Vec = std::vector<double>;

// The per-micro-batch context of one forward and backward of a standalone
// layer (layers/saved.hpp), with the scratch the layer asks for; training:
// the layer's mode unless given.
template <class T>
struct OneMicroBatch {
  VectorBuffer<T> memory;
  Saved<T> saved;
  OneMicroBatch(const Layer<T>& layer, ConstMatrix<T> x, Matrix<T> y, std::size_t row_offset = 0)
      : memory("saved", layer.saved_size(x.extent(0))) {
    saved.x = x;
    saved.y = y;
    saved.row_offset = row_offset;
    saved.training = layer.training();
    saved.scratch = memory;
  }
};

// A standalone layer with its own parameter and gradient buffers (Bound:
// in double, as the finite differences need).
template <class T>
struct BoundT {
  using V = std::vector<T>;
  LayerPtr<T> layer;
  std::size_t batch, in, out;
  VectorBuffer<T> params, grads;
  Context ctx;

  BoundT(LayerPtr<T> l, std::size_t batch_, std::size_t in_, std::uint64_t seed,
         GemmBackend gemm = Blas::vendor_available() ? GemmBackend::vendor : GemmBackend::portable)
      : BoundT(std::move(l), batch_, Shape{in_}, seed, gemm) {}
  // A layer with a per-sample input of any shape (rows of its numel values).
  BoundT(LayerPtr<T> l, std::size_t batch_, const Shape& in_shape, std::uint64_t seed,
         GemmBackend gemm = Blas::vendor_available() ? GemmBackend::vendor : GemmBackend::portable)
      : layer(std::move(l)),
        batch(batch_),
        in(in_shape.numel()),
        out(layer->output_shape(in_shape).numel()),
        ctx(gemm) {
    layer->set_input_shape(in_shape);
    const std::size_t n = layer->num_params();
    params = VectorBuffer<T>("params", n);
    grads = VectorBuffer<T>("grads", n);
    layer->bind(params, grads);
    layer->reserve(batch, in);
    // Random parameters (not the initialiser's), so that every term matters.
    Kokkos::deep_copy(params, test::to_device(test::randn<T>(n, seed)));
  }
  V forward(const V& x) {
    auto dx = test::to_device(x, batch, in);
    MatrixBuffer<T> y("y", batch, out);
    OneMicroBatch<T> m(*layer, dx, y);
    begin_pass(*layer);
    layer->forward(ctx, dx, y, m.saved);
    Kokkos::fence();
    return test::to_host(y);
  }
  // Returns dx for upstream gradient dy (after a forward on x); parameter
  // gradients accumulate into `grads` (zeroed first).
  V backward(const V& x, const V& dy) {
    Kokkos::deep_copy(grads, T(0));
    auto dxin = test::to_device(x, batch, in);
    MatrixBuffer<T> y("y", batch, out), dx("dx", batch, in);
    OneMicroBatch<T> m(*layer, dxin, y);
    begin_pass(*layer);
    layer->forward(ctx, dxin, y, m.saved);
    layer->backward(ctx, test::to_device(dy, batch, out), dx, m.saved);
    Kokkos::fence();
    return test::to_host(dx);
  }
  V param_values() { return test::to_host(params); }
  void set_params(const V& p) { Kokkos::deep_copy(params, test::to_device(p)); }
};
using Bound = BoundT<double>;

inline double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Checks backward against central differences of L = sum(forward(x) * r).
// skip(x_i): true where the function is not smooth near x_i.
inline void check_gradients(Bound& b, const Vec& x, std::uint64_t seed,
                     const std::function<bool(double)>& skip = nullptr,
                     const std::function<void()>& before_forward = nullptr) {
  const Vec r = test::randn<double>(b.batch * b.out, seed + 100);
  auto loss = [&](const Vec& xv) {
    if (before_forward) before_forward();
    return dot(b.forward(xv), r);
  };
  if (before_forward) before_forward();
  const Vec dx = b.backward(x, r);
  const Vec dp = test::to_host(b.grads);
  const double h = 1e-6;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (skip && skip(x[i])) continue;
    Vec xp = x, xm = x;
    xp[i] += h;
    xm[i] -= h;
    const double fd = (loss(xp) - loss(xm)) / (2 * h);
    ASSERT_NEAR(dx[i], fd, 1e-6 * (1 + std::fabs(fd))) << b.layer->name() << " dx[" << i << "]";
  }
  const Vec p0 = b.param_values();
  for (std::size_t i = 0; i < p0.size(); ++i) {
    Vec pp = p0, pm = p0;
    pp[i] += h;
    pm[i] -= h;
    b.set_params(pp);
    const double lp = loss(x);
    b.set_params(pm);
    const double lm = loss(x);
    const double fd = (lp - lm) / (2 * h);
    ASSERT_NEAR(dp[i], fd, 1e-6 * (1 + std::fabs(fd))) << b.layer->name() << " dparam[" << i << "]";
  }
  b.set_params(p0);
}

inline void expect_near(const Vec& got, const Vec& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << what << " at " << i;
}

}  // namespace test
}  // namespace strata
