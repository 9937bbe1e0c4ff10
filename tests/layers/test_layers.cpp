// Every layer against its naive host reference (forward) and against central
// finite differences in double precision (backward: input and parameter
// gradients). Losses likewise; Sequential against the composition of layers.
#include "backends/error.hpp"
#include "backends/launch.hpp"
#include "backends/random.hpp"
#include "backends/lanes.hpp"
#include "backends/segment_sums.hpp"
#include "backends/vmath.hpp"
#include "layers/block.hpp"
#include "layers/dropout.hpp"
#include "layers/layernorm.hpp"
#include "layers/linear.hpp"
#include "layers/loss.hpp"
#include "layers/mlp.hpp"
#include "layers/optimizer.hpp"
#include "layer_harness.hpp"
#include "test_utils.hpp"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <tuple>

namespace strata {
namespace {

using test::Bound;
using test::Vec;
using test::check_gradients;
using test::dot;
using test::expect_near;

// ---------------------------------------------------------------- Linear
Vec linear_reference(const Vec& x, const Vec& p, std::size_t batch, std::size_t in,
                     std::size_t out) {
  Vec y(batch * out);
  for (std::size_t i = 0; i < batch; ++i)
    for (std::size_t o = 0; o < out; ++o) {
      double s = p[out * in + o];
      for (std::size_t k = 0; k < in; ++k) s += x[i * in + k] * p[o * in + k];
      y[i * out + o] = s;
    }
  return y;
}

TEST(Linear, ForwardMatchesReference) {
  for (GemmBackend g : {GemmBackend::portable, GemmBackend::vendor}) {
    if (g == GemmBackend::vendor && !Blas::vendor_available()) continue;
    // Element type spelled out: nvcc's front end cannot deduce it from {tuple{...}, {...}}.
    for (auto [batch, in, out] :
         std::initializer_list<std::tuple<int, int, int>>{{1, 1, 1}, {7, 33, 5}, {32, 10, 5}}) {
      Bound b(std::make_unique<Linear<double>>(in, out), batch, in, 1, g);
      const Vec x = test::randn<double>(batch * in, 2);
      expect_near(b.forward(x), linear_reference(x, b.param_values(), batch, in, out), 1e-12,
                  "Linear forward");
    }
  }
}

TEST(Linear, GradientsMatchFiniteDifferences) {
  Bound b(std::make_unique<Linear<double>>(6, 4), 5, 6, 3);
  check_gradients(b, test::randn<double>(5 * 6, 4), 5);
}

TEST(Linear, GradientsAccumulate) {
  Bound b(std::make_unique<Linear<double>>(3, 2), 4, 3, 3);
  const Vec x = test::randn<double>(12, 1), dy = test::randn<double>(8, 2);
  b.backward(x, dy);
  const Vec once = test::to_host(b.grads);
  // A second backward without zeroing doubles every parameter gradient.
  auto xd = test::to_device(x, 4, 3);
  MatrixBuffer<double> y("y", 4, 2), dx("dx", 4, 3);
  test::OneMicroBatch<double> m(*b.layer, xd, y);
  b.layer->forward(b.ctx, xd, y, m.saved);
  b.layer->backward(b.ctx, test::to_device(dy, 4, 2), dx, m.saved);
  const Vec twice = test::to_host(b.grads);
  for (std::size_t i = 0; i < once.size(); ++i) EXPECT_NEAR(twice[i], 2 * once[i], 1e-12);
}

TEST(Linear, WrongInputWidthNamesBothWidths) {
  Linear<float> l(784, 10);
  try {
    l.output_shape(Shape{100});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config);
    EXPECT_NE(e.message().find("784"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("100"), std::string::npos) << e.message();
  }
}

// ---------------------------------------------------------------- activations
double act_reference(ActivationKind k, double x) {
  switch (k) {
    case ActivationKind::relu: return x > 0 ? x : 0;
    case ActivationKind::gelu: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case ActivationKind::tanh: return std::tanh(x);
    case ActivationKind::sigmoid: return 1 / (1 + std::exp(-x));
  }
  return 0;
}

class Activations : public ::testing::TestWithParam<ActivationKind> {};

TEST_P(Activations, ForwardMatchesReference) {
  Bound b(make_activation<double>(GetParam()), 9, 7, 1);
  Vec x = test::randn<double>(63, 6);
  x[0] = 0;
  x[1] = 30;
  x[2] = -30;
  const Vec y = b.forward(x);
  for (std::size_t i = 0; i < x.size(); ++i)
    ASSERT_NEAR(y[i], act_reference(GetParam(), x[i]), 1e-14) << b.layer->name() << " x=" << x[i];
}

TEST_P(Activations, GradientsMatchFiniteDifferences) {
  Bound b(make_activation<double>(GetParam()), 9, 7, 1);
  // ReLU is not differentiable at 0: skip inputs within reach of the step.
  auto skip = [&](double x) { return GetParam() == ActivationKind::relu && std::fabs(x) < 1e-4; };
  check_gradients(b, test::randn<double>(63, 7), 8, skip);
}

INSTANTIATE_TEST_SUITE_P(All, Activations,
                         ::testing::Values(ActivationKind::relu, ActivationKind::gelu,
                                           ActivationKind::tanh, ActivationKind::sigmoid),
                         [](const auto& info) { return std::string(to_string(info.param)); });

// ---------------------------------------------------------------- vmath
// The float exp and tanh of backends/vmath.hpp (what Tanh, Sigmoid and the
// softmax use in float) against double-precision libm, in units in the last place
// of the float result: a dense sweep, tiny magnitudes and the special values.
double ulps(float got, double want) {
  const float w = static_cast<float>(want);
  if (std::isinf(w)) return got == w ? 0 : HUGE_VAL;
  const double ulp = std::nextafter(std::fabs(w), HUGE_VALF) - std::fabs(w);
  return std::fabs(static_cast<double>(got) - want) / ulp;
}

template <class F, class R>
double worst_ulps(F f, R ref, double lo, double hi, std::size_t n, double* at) {
  std::vector<float> xs;
  for (std::size_t i = 0; i <= n; ++i) xs.push_back(static_cast<float>(lo + (hi - lo) * i / n));
  for (double m = 1e-30; m < 1; m *= 1.01) {
    xs.push_back(static_cast<float>(m));
    xs.push_back(static_cast<float>(-m));
  }
  double worst = 0;
  for (float x : xs) {
    const double e = ulps(f(x), ref(static_cast<double>(x)));
    if (!(e <= worst)) {  // NaN counts as worst
      worst = e;
      *at = x;
    }
  }
  return worst;
}

TEST(VMath, FloatFunctionsAreWithinTheirStatedUlps) {
  double at = 0;
  const double e_exp = worst_ulps([](float x) { return vmath::exp(x); },
                                  [](double x) { return std::exp(x); }, -103.9, 88.72, 400000, &at);
  EXPECT_LE(e_exp, 1.35) << "exp at x = " << at;
  const double e_tanh = worst_ulps([](float x) { return vmath::tanh(x); },
                                   [](double x) { return std::tanh(x); }, -12, 12, 400000, &at);
  EXPECT_LE(e_tanh, 1.5) << "tanh at x = " << at;
  const double e_erf = worst_ulps([](float x) { return vmath::erf(x); },
                                  [](double x) { return std::erf(x); }, -4.5, 4.5, 400000, &at);
  EXPECT_LE(e_erf, 6.6) << "erf at x = " << at;
  // Every float of [3, 4], where the float sums of P and Q err most (and
  // would exceed 1 without erf's clamp), and 1e-30 to 1e-3 in steps of
  // 0.01%, where erf(x) is near 2x / sqrt(pi) (relative error).
  double worst_3_4 = 0;
  for (float x = 3.0f; x <= 4.0f; x = std::nextafter(x, 5.0f)) {
    ASSERT_LE(vmath::erf(x), 1.0f) << "erf at x = " << x;
    worst_3_4 = std::max(worst_3_4, ulps(vmath::erf(x), std::erf(double(x))));
  }
  EXPECT_LE(worst_3_4, 6.6) << "erf on [3, 4]";
  for (float x = 1e-30f; x < 1e-3f; x *= 1.0001f)
    ASSERT_LE(ulps(vmath::erf(x), std::erf(double(x))), 6.6) << "erf at x = " << x;
  // Every float of [0.5, 2), where tanh's branches meet.
  for (float x = 0.5f; x < 2.0f; x = std::nextafter(x, 4.0f)) {
    ASSERT_LE(ulps(vmath::tanh(x), std::tanh(double(x))), 1.5) << "tanh at x = " << x;
    ASSERT_LE(ulps(vmath::exp(x), std::exp(double(x))), 1.35) << "exp at x = " << x;
  }
}

TEST(VMath, SpecialValues) {
  const float inf = HUGE_VALF, nan = std::nanf("");
  EXPECT_EQ(vmath::exp(0.0f), 1.0f);
  EXPECT_EQ(vmath::exp(inf), inf);
  EXPECT_EQ(vmath::exp(89.0f), inf);
  EXPECT_EQ(vmath::exp(-inf), 0.0f);
  EXPECT_EQ(vmath::exp(-104.0f), 0.0f);
  EXPECT_TRUE(std::isnan(vmath::exp(nan)));
  // Subnormal results, rounded once: within one subnormal unit.
  for (float x : {-87.5f, -90.0f, -95.0f, -100.0f, -103.0f})
    EXPECT_LE(std::fabs(double(vmath::exp(x)) - std::exp(double(x))), 0x1p-149) << x;
  EXPECT_EQ(vmath::tanh(inf), 1.0f);
  EXPECT_EQ(vmath::tanh(-inf), -1.0f);
  EXPECT_EQ(vmath::tanh(-100.0f), -1.0f);
  EXPECT_TRUE(std::signbit(vmath::tanh(-0.0f)));
  EXPECT_TRUE(std::isnan(vmath::tanh(nan)));
  EXPECT_EQ(vmath::erf(4.0f), 1.0f);
  EXPECT_EQ(vmath::erf(-4.0f), -1.0f);
  EXPECT_EQ(vmath::erf(inf), 1.0f);
  EXPECT_EQ(vmath::erf(-inf), -1.0f);
  EXPECT_EQ(vmath::erf(0.0f), 0.0f);
  EXPECT_TRUE(std::signbit(vmath::erf(-0.0f)));
  EXPECT_TRUE(std::isnan(vmath::erf(nan)));
  // Odd (the sign is put back by its bit): every float of [1, 4].
  for (float x = 1.0f; x <= 4.0f; x = std::nextafter(x, 5.0f)) ASSERT_EQ(vmath::erf(-x), -vmath::erf(x)) << x;
  EXPECT_EQ(vmath::exp(2.0), std::exp(2.0)) << "double arguments use libm";
}

// Float activation layers (computed with vmath, on the backend's device)
// against the double reference: forward within a few float roundings of
// each intermediate, backward (GELU's Phi + x phi, Tanh's 1 - y^2,
// Sigmoid's y (1 - y)) likewise.
// A float activation layer's forward y and backward dx on the backend's
// device, for inputs x and gradients dy of (rows, cols).
struct ActivationRun {
  std::string name;
  std::vector<float> y, dx;
};
ActivationRun run_activation(ActivationKind kind, const std::vector<float>& x,
                             const std::vector<float>& dy, std::size_t rows, std::size_t cols) {
  auto layer = make_activation<float>(kind);
  layer->reserve(rows, cols);
  Context ctx;
  MatrixBuffer<float> y("y", rows, cols), dx("dx", rows, cols);
  auto xd = test::to_device(x, rows, cols);
  test::OneMicroBatch<float> m(*layer, xd, y);
  begin_pass(*layer);
  layer->forward(ctx, xd, y, m.saved);
  layer->backward(ctx, test::to_device(dy, rows, cols), dx, m.saved);
  ctx.exec.fence();
  return {layer->name(), test::to_host(y), test::to_host(dx)};
}

TEST_P(Activations, FloatLayerMatchesTheDoubleReference) {
  const std::size_t rows = 64, cols = 129;
  std::vector<float> x(rows * cols), dy(rows * cols, 1.0f);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = -12.0f + 24.0f * float(i) / float(x.size());
  const ActivationRun run = run_activation(GetParam(), x, dy, rows, cols);
  const auto& yh = run.y;
  const auto& dxh = run.dx;
  const double h = 1e-5;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double xi = x[i];
    const double tol = 8 * FLT_EPSILON * (1 + std::fabs(xi));
    ASSERT_NEAR(yh[i], act_reference(GetParam(), xi), tol) << run.name << " x=" << xi;
    if (GetParam() == ActivationKind::relu && std::fabs(xi) < h) continue;
    const double d = (act_reference(GetParam(), xi + h) - act_reference(GetParam(), xi - h)) / (2 * h);
    ASSERT_NEAR(dxh[i], d, tol + 1e-8) << run.name << " derivative at x=" << xi;
  }
}

// A baseline build's host kernels also run as an x86-64-v3 clone where the
// CPU has AVX2 (backends/host_clones.hpp); the floating-point contract makes
// the clone compute the same bits as the build's own target. Oracle: the
// same formulas (vmath's) in plain loops of this file, compiled for the
// build's target alone, on 2^16 arguments from -12 to 12 and the rest of
// random bits. Equal bits are asserted, except that any NaN equals any NaN
// (IEEE 754 leaves a NaN result's sign and payload open, and x86 code
// propagates an operand's: which one depends on the compiler's operand order).
TEST_P(Activations, FloatLayerGivesTheBitsOfThisBuildsTarget) {
  const std::size_t rows = 256, cols = 272;
  std::vector<float> x(rows * cols), dy(rows * cols);
  std::uint64_t state = 7;
  for (std::size_t i = 0; i < x.size(); ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const auto bits = static_cast<std::uint32_t>(state >> 32);
    std::memcpy(&x[i], &bits, sizeof bits);  // random bits: every exponent, NaNs and infinities
    if (i < 65536) x[i] = -12.0f + 24.0f * float(i) / 65536.0f;
    dy[i] = 0.5f + float(i % 97) / 97.0f;
  }
  const ActivationRun run = run_activation(GetParam(), x, dy, rows, cols);
  const auto& yh = run.y;
  const auto& dxh = run.dx;
  std::vector<float> ry(x.size()), rdx(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float v = x[i];
    switch (GetParam()) {
      case ActivationKind::relu:
        ry[i] = v > 0.0f ? v : 0.0f;
        rdx[i] = dy[i] * (ry[i] > 0.0f ? 1.0f : 0.0f);
        break;
      case ActivationKind::gelu: {
        ry[i] = 0.5f * v * (1.0f + vmath::erf(v * 0.70710678118654752440f));
        const float cdf = 0.5f * (1.0f + vmath::erf(v * 0.70710678118654752440f));
        const float pdf = 0.39894228040143267794f * vmath::exp(-0.5f * v * v);
        rdx[i] = dy[i] * (cdf + v * pdf);
        break;
      }
      case ActivationKind::tanh:
        ry[i] = vmath::tanh(v);
        rdx[i] = dy[i] * (1.0f - ry[i] * ry[i]);
        break;
      case ActivationKind::sigmoid:
        ry[i] = 1.0f / (1.0f + vmath::exp(-v));
        rdx[i] = dy[i] * (ry[i] * (1.0f - ry[i]));
        break;
    }
  }
  auto same = [](float a, float b) {
    return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof(float)) == 0;
  };
  for (std::size_t i = 0; i < x.size(); ++i) {
    ASSERT_TRUE(same(yh[i], ry[i])) << run.name << " x=" << x[i] << ": " << yh[i] << " against " << ry[i];
    ASSERT_TRUE(same(dxh[i], rdx[i]))
        << run.name << " backward at x=" << x[i] << ": " << dxh[i] << " against " << rdx[i];
  }
}

TEST(Activation, UnknownNameIsAConfigError) {
  EXPECT_THROW(parse_activation("swish"), Error);
}

// ---------------------------------------------------------------- Dropout
TEST(Dropout, KeepsOrZeroesWithTheRightRateAndScale) {
  const std::size_t rows = 200, cols = 500;
  const double p = 0.3;
  Bound b(std::make_unique<Dropout<double>>(p, 7), rows, cols, 1);
  const Vec x = test::randn<double>(rows * cols, 1);
  const Vec y = b.forward(x);
  std::size_t dropped = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (y[i] == 0) ++dropped;
    else ASSERT_NEAR(y[i], x[i] / (1 - p), 1e-14);
  }
  // 100000 Bernoulli(0.3) draws: the standard deviation of the rate is 0.0015.
  EXPECT_NEAR(double(dropped) / x.size(), p, 0.01);
}

TEST(Dropout, SameSeedSameMaskNewMaskEachCall) {
  auto d1 = std::make_unique<Dropout<double>>(0.5, 11);
  auto d2 = std::make_unique<Dropout<double>>(0.5, 11);
  Bound a(std::move(d1), 10, 10, 1), b(std::move(d2), 10, 10, 1);
  const Vec x = test::randn<double>(100, 3);
  const Vec ya = a.forward(x), yb = b.forward(x), ya2 = a.forward(x);
  EXPECT_EQ(ya, yb);
  EXPECT_NE(ya, ya2);
}

TEST(Dropout, BackwardUsesTheForwardMask) {
  Bound b(std::make_unique<Dropout<double>>(0.4, 5), 8, 16, 1);
  const Vec x = test::randn<double>(128, 2), dy = test::randn<double>(128, 3);
  const Vec dx = b.backward(x, dy);
  static_cast<Dropout<double>&>(*b.layer).set_calls(0);
  const Vec y = b.forward(x);  // same call number as in backward() above
  for (std::size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(dx[i], y[i] / x[i] * dy[i], 1e-12);
}

TEST(Dropout, GradientsMatchFiniteDifferences) {
  Bound b(std::make_unique<Dropout<double>>(0.25, 9), 4, 6, 1);
  auto& d = static_cast<Dropout<double>&>(*b.layer);
  check_gradients(b, test::randn<double>(24, 4), 5, nullptr, [&] { d.set_calls(0); });
}

TEST(Dropout, EvaluationModeIsIdentity) {
  Bound b(std::make_unique<Dropout<double>>(0.9, 5), 4, 4, 1);
  b.layer->set_training(false);
  const Vec x = test::randn<double>(16, 2);
  EXPECT_EQ(b.forward(x), x);
}

// ---------------------------------------------------------------- LayerNorm
TEST(LayerNorm, ForwardMatchesReference) {
  const std::size_t batch = 5, n = 12;
  Bound b(std::make_unique<LayerNorm<double>>(n), batch, n, 3);
  Vec x = test::randn<double>(batch * n, 4);
  for (auto& v : x) v = 3 * v + 10;  // offset and scale: normalisation must undo them
  const Vec p = b.param_values(), y = b.forward(x);
  for (std::size_t i = 0; i < batch; ++i) {
    double mean = 0, var = 0;
    for (std::size_t j = 0; j < n; ++j) mean += x[i * n + j] / n;
    for (std::size_t j = 0; j < n; ++j) var += (x[i * n + j] - mean) * (x[i * n + j] - mean) / n;
    for (std::size_t j = 0; j < n; ++j) {
      const double want = (x[i * n + j] - mean) / std::sqrt(var + 1e-5) * p[j] + p[n + j];
      ASSERT_NEAR(y[i * n + j], want, 1e-12);
    }
  }
}

TEST(LayerNorm, GradientsMatchFiniteDifferences) {
  Bound b(std::make_unique<LayerNorm<double>>(6), 4, 6, 3);
  check_gradients(b, test::randn<double>(24, 4), 5);
}

TEST(LayerNorm, InitIsOnesAndZeros) {
  Sequential<float> m(4);
  m.add(std::make_unique<LayerNorm<float>>(4));
  m.build(2);
  m.init(Init::kaiming_uniform, 1);
  EXPECT_EQ(test::to_host(m.params()), (std::vector<float>{1, 1, 1, 1, 0, 0, 0, 0}));
}

// ---------------------------------------------------------------- losses
struct LossCase {
  std::size_t batch = 6, width = 5;
  Vec out = test::randn<double>(30, 1);
  std::vector<std::int32_t> labels{0, 4, 2, 2, 1, 3};
  Vec values = test::randn<double>(30, 2);
};

double loss_sum(Loss<double>& loss, const LossCase& c, const Vec& out, Vec* grad, double scale) {
  Context ctx;
  auto dout = test::to_device(out, c.batch, c.width);
  LabelsBuffer labels("labels", c.labels.size());
  Kokkos::deep_copy(labels, Kokkos::View<const std::int32_t*, Kokkos::HostSpace,
                                         Kokkos::MemoryTraits<Kokkos::Unmanaged>>(c.labels.data(), c.labels.size()));
  auto values = test::to_device(c.values, c.batch, c.width);
  Targets<double> t;
  if (loss.kind() == LossKind::cross_entropy) t.labels = labels;
  else t.values = values;
  MatrixBuffer<double> g("g", c.batch, c.width);
  const double s = loss.forward_backward(ctx, dout, t, grad ? Matrix<double>(g) : Matrix<double>(), scale).value();
  if (grad) *grad = test::to_host(g);
  return s;
}

TEST(SoftmaxCrossEntropy, MatchesReferenceAndFiniteDifferences) {
  LossCase c;
  SoftmaxCrossEntropy<double> loss;
  double want = 0;
  for (std::size_t i = 0; i < c.batch; ++i) {
    double s = 0;
    for (std::size_t j = 0; j < c.width; ++j) s += std::exp(c.out[i * c.width + j]);
    want += std::log(s) - c.out[i * c.width + c.labels[i]];
  }
  Vec grad;
  EXPECT_NEAR(loss_sum(loss, c, c.out, &grad, 0.25), want, 1e-12);
  for (std::size_t i = 0; i < c.out.size(); ++i) {
    Vec p = c.out, m = c.out;
    p[i] += 1e-6;
    m[i] -= 1e-6;
    const double fd = 0.25 * (loss_sum(loss, c, p, nullptr, 1) - loss_sum(loss, c, m, nullptr, 1)) / 2e-6;
    ASSERT_NEAR(grad[i], fd, 1e-7) << i;
  }
}

// One label per position: 2 samples of 3 positions x 5 classes are the 6
// rows of the one-label case; the sample's loss is the mean over its positions.
TEST(SoftmaxCrossEntropy, PerPositionLabelsAreRowsOfTheirPositions) {
  LossCase rows, c;
  c.batch = 2;
  c.width = 15;
  SoftmaxCrossEntropy<double> loss;
  Vec g_rows, g;
  EXPECT_NEAR(3 * loss_sum(loss, c, c.out, &g, 0.5), loss_sum(loss, rows, rows.out, &g_rows, 0.5 / 3),
              1e-12);
  EXPECT_EQ(g, g_rows);  // 0.5 * (1/3) and 0.5 / 3 are the same double
  // A negative label (ignore_index) adds nothing and gets a zero gradient;
  // the mean still divides by the 3 positions.
  {
    LossCase ig = c, ig_rows = rows;
    ig.labels[4] = -100;
    ig_rows.labels.erase(ig_rows.labels.begin() + 4);
    ig_rows.out.erase(ig_rows.out.begin() + 20, ig_rows.out.begin() + 25);
    ig_rows.batch = 5;
    ig_rows.values.resize(25);
    Vec gi, gi_rows;
    EXPECT_NEAR(3 * loss_sum(loss, ig, ig.out, &gi, 0.5),
                loss_sum(loss, ig_rows, ig_rows.out, &gi_rows, 0.5 / 3), 1e-12);
    for (std::size_t j = 20; j < 25; ++j) EXPECT_EQ(gi[j], 0.0) << j;
    gi.erase(gi.begin() + 20, gi.begin() + 25);
    EXPECT_EQ(gi, gi_rows);
  }
  Context ctx;
  LabelsBuffer labels("labels", 6);
  Kokkos::deep_copy(labels, test::to_device(std::vector<std::int32_t>(c.labels)));
  std::size_t want = 0;  // the reference: argmax per row of 5
  for (std::size_t r = 0; r < 6; ++r) {
    std::size_t best = 0;
    for (std::size_t j = 1; j < 5; ++j)
      if (c.out[r * 5 + j] > c.out[r * 5 + best]) best = j;
    want += best == static_cast<std::size_t>(c.labels[r]);
  }
  EXPECT_EQ(count_correct<double>(ctx, test::to_device(c.out, 2, 15), labels), want);
  // Labels that do not divide the output: an error naming both shapes.
  c.labels.resize(4);
  try {
    loss_sum(loss, c, c.out, nullptr, 1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("4 labels for a model output of shape (2, 15)"), std::string::npos) << e.message();
  }
}

TEST(SoftmaxCrossEntropy, StableForHugeLogits) {
  LossCase c;
  c.batch = 2;
  c.width = 3;
  c.labels = {0, 2};
  const Vec out{1000, -1000, 0, 500, 500, -500};
  Vec grad;
  SoftmaxCrossEntropy<double> loss;
  const double s = loss_sum(loss, c, out, &grad, 1);
  // Row 0: label 0 dominates, loss ~ 0; row 1: label 2 is 1000 below the max.
  EXPECT_NEAR(s, std::log(2.0) + 1000, 1e-9);
  for (double g : grad) EXPECT_TRUE(std::isfinite(g));
}

TEST(MeanSquaredError, MatchesReferenceAndFiniteDifferences) {
  LossCase c;
  MeanSquaredError<double> loss;
  double want = 0;
  for (std::size_t i = 0; i < c.out.size(); ++i)
    want += (c.out[i] - c.values[i]) * (c.out[i] - c.values[i]) / c.width;
  Vec grad;
  EXPECT_NEAR(loss_sum(loss, c, c.out, &grad, 0.5), want, 1e-12);
  for (std::size_t i = 0; i < c.out.size(); ++i) {
    Vec p = c.out, m = c.out;
    p[i] += 1e-6;
    m[i] -= 1e-6;
    const double fd = 0.5 * (loss_sum(loss, c, p, nullptr, 1) - loss_sum(loss, c, m, nullptr, 1)) / 2e-6;
    ASSERT_NEAR(grad[i], fd, 1e-7) << i;
  }
}

TEST(MeanSquaredError, TargetShapeMismatchNamesLossAndBothShapes) {
  // The PyTorch tutorial's mistake: targets (32, 5) for outputs (32, 2).
  MatrixBuffer<float> out("out", 32, 2), target("target", 32, 5), g("g", 32, 2);
  Context ctx;
  MeanSquaredError<float> loss;
  try {
    loss.forward_backward(ctx, out, Targets<float>{Labels(), target}, g, 1.0f);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config);
    const std::string m = e.message();
    EXPECT_NE(m.find("MSE"), std::string::npos) << m;
    EXPECT_NE(m.find("(32, 5)"), std::string::npos) << m;
    EXPECT_NE(m.find("(32, 2)"), std::string::npos) << m;
  }
}

TEST(CountCorrect, CountsArgmaxMatches) {
  Context ctx;
  auto out = test::to_device(std::vector<float>{0, 1, 2, 5, 1, 0, 3, 3, 1}, 3, 3);
  LabelsBuffer labels("l", 3);
  auto h = Kokkos::create_mirror_view(labels);
  h(0) = 2;  // right
  h(1) = 1;  // wrong (argmax 0)
  h(2) = 0;  // right: ties go to the first index
  Kokkos::deep_copy(labels, h);
  EXPECT_EQ(count_correct<float>(ctx, out, labels), 2u);
}

// ---------------------------------------------------------------- Sequential
TEST(Sequential, ForwardAndBackwardMatchComposedLayers) {
  // Linear(4,6) - Tanh - Linear(6,3) against the references composed by hand.
  Sequential<double> m = make_mlp<double>({{4, 6, 3}, ActivationKind::tanh});
  m.build(5);
  m.init(Init::xavier_uniform, 3);
  Context ctx;
  const Vec x = test::randn<double>(20, 1);
  auto dx = test::to_device(x, 5, 4);
  const Vec y = test::to_host(m.forward(ctx, dx));
  const Vec p = test::to_host(m.params());
  Vec p1(p.begin(), p.begin() + 30), p2(p.begin() + 30, p.end());
  Vec h = linear_reference(x, p1, 5, 4, 6);
  for (auto& v : h) v = std::tanh(v);
  expect_near(y, linear_reference(h, p2, 5, 6, 3), 1e-12, "Sequential forward");

  // Gradients of sum(y * r) by finite differences on the flat parameters.
  const Vec r = test::randn<double>(15, 9);
  m.zero_grad(ctx);
  Kokkos::deep_copy(m.output_grad(), test::to_device(r, 5, 3));
  m.backward(ctx);
  const Vec g = test::to_host(m.grads());
  auto loss = [&](const Vec& params) {
    Kokkos::deep_copy(m.params(), test::to_device(params));
    return dot(test::to_host(m.forward(ctx, dx)), r);
  };
  for (std::size_t i = 0; i < p.size(); ++i) {
    Vec pp = p, pm = p;
    pp[i] += 1e-6;
    pm[i] -= 1e-6;
    const double fd = (loss(pp) - loss(pm)) / 2e-6;
    ASSERT_NEAR(g[i], fd, 1e-6 * (1 + std::fabs(fd))) << "param " << i;
  }
}

TEST(Sequential, IncompatibleLayerNamesItsPosition) {
  Sequential<float> m(10);
  m.add(std::make_unique<Linear<float>>(10, 5));
  try {
    m.add(std::make_unique<Linear<float>>(4, 2));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("layer 1"), std::string::npos) << e.message();
  }
}

TEST(Sequential, InitIsDeterministicAndSeeded) {
  auto params = [](std::uint64_t seed, Init init) {
    Sequential<float> m = make_mlp<float>({{20, 30, 10}});
    m.build(1);
    m.init(init, seed);
    return test::to_host(m.params());
  };
  EXPECT_EQ(params(1, Init::kaiming_uniform), params(1, Init::kaiming_uniform));
  EXPECT_NE(params(1, Init::kaiming_uniform), params(2, Init::kaiming_uniform));
  // Kaiming uniform: weights within sqrt(6 / fan_in), biases zero, spread out.
  const auto p = params(5, Init::kaiming_uniform);
  double maxabs = 0;
  for (std::size_t i = 0; i < 600; ++i) maxabs = std::max(maxabs, std::fabs(double(p[i])));
  EXPECT_LE(maxabs, std::sqrt(6.0 / 20));
  EXPECT_GT(maxabs, 0.9 * std::sqrt(6.0 / 20));
  for (std::size_t i = 600; i < 630; ++i) EXPECT_EQ(p[i], 0.0f);
  // Normal schemes have the promised standard deviation.
  const auto q = params(6, Init::kaiming_normal);
  double ss = 0;
  for (std::size_t i = 0; i < 600; ++i) ss += double(q[i]) * q[i];
  EXPECT_NEAR(std::sqrt(ss / 600), std::sqrt(2.0 / 20), 0.03);
}

TEST(Sequential, BatchLargerThanBuiltIsAnError) {
  Sequential<float> m = make_mlp<float>({{3, 2}});
  m.build(4);
  MatrixBuffer<float> x("x", 5, 3);
  Context ctx;
  EXPECT_THROW(m.forward(ctx, x), Error);
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// A build for batches of max_batch rows with activations stored in p.
BuildOptions stored(std::size_t max_batch, Precision p, bool emulated = false, std::size_t slots = 1) {
  BuildOptions b;
  b.max_batch = max_batch;
  b.slots = slots;
  b.numerics.storage = p;
  b.numerics.emulated = emulated;
  return b;
}

// Each layer with 16-bit activation storage (Numerics::storage) against
// the same layer in fp32, preceded by a Linear so that the layer's input
// gradient is exercised too: the output is the fp32 output rounded once
// (within 2 units of roundoff u = 2^-8 bf16, 2^-11 fp16 of the element plus
// 2u of the largest output, for the rounded input),
// and every gradient stays within 2% (bf16) / 0.3% (fp16) of the largest
// fp32 gradient (measured at most about a quarter of that; printed).
TEST(LowPrecisionStorage, EachLayerWithinBoundsOfFp32) {
  const std::size_t batch = 16, in = 24, width = 32;
  using Make = std::function<LayerPtr<float>()>;
  const std::vector<std::pair<std::string, Make>> layers = {
      {"Linear", [&] { return std::make_unique<Linear<float>>(width, 20); }},
      {"ReLU", [] { return make_activation<float>(ActivationKind::relu); }},
      {"GELU", [] { return make_activation<float>(ActivationKind::gelu); }},
      {"Tanh", [] { return make_activation<float>(ActivationKind::tanh); }},
      {"Sigmoid", [] { return make_activation<float>(ActivationKind::sigmoid); }},
      {"LayerNorm", [&] { return std::make_unique<LayerNorm<float>>(width); }},
  };
  Context ctx;
  const auto x = test::randn<float>(batch * in, 5);
  auto dxin = test::to_device(x, batch, in);
  for (const auto& entry : layers) {
    // Named, not a structured binding: lambdas may not capture those in C++17
    // (clang refuses; the HIP build compiles the tests with it).
    const auto& name = entry.first;
    const auto& make = entry.second;
    struct Out {
      std::vector<float> y, g;
    };
    auto run = [&](Precision p) {
      Sequential<float> m(in);
      m.add(std::make_unique<Linear<float>>(in, width));
      m.add(make());
      m.build(stored(batch, p));
      m.init(Init::kaiming_uniform, 11);
      m.zero_grad(ctx);
      Out o;
      o.y = test::to_host(m.forward(ctx, dxin));
      const auto dy = test::randn<float>(o.y.size(), 6);
      Kokkos::deep_copy(m.output_grad(), test::to_device(dy, batch, m.out_features()));
      m.backward(ctx);
      o.g = test::to_host(m.grads());
      return o;
    };
    const Out ref = run(Precision::fp32);
    for (auto [p, unit, gtol] : {std::tuple{Precision::bf16, 1.0 / 256, 0.02},
                                 std::tuple{Precision::fp16, 1.0 / 2048, 0.003}}) {
      const Out low = run(p);
      double gmax = 0, gdev = 0;
      for (float v : ref.g) gmax = std::max(gmax, double(std::fabs(v)));
      for (std::size_t i = 0; i < ref.g.size(); ++i)
        gdev = std::max(gdev, std::fabs(double(low.g[i]) - ref.g[i]) / gmax);
      double ymax = 0;
      for (float v : ref.y) ymax = std::max(ymax, double(std::fabs(v)));
      for (std::size_t i = 0; i < ref.y.size(); ++i) {
        // The output is rounded once; the layer's input was rounded too,
        // which a Linear or LayerNorm mixes across features (hence the
        // term relative to the largest output).
        const double tol = 2 * unit * std::fabs(ref.y[i]) + 2 * unit * ymax;
        ASSERT_NEAR(low.y[i], ref.y[i], tol) << name << " " << to_string(p) << " output " << i;
      }
      std::printf("%s %s: gradient deviation %.2e of the largest\n", name.c_str(), to_string(p), gdev);
      EXPECT_LT(gdev, gtol) << name << " " << to_string(p);
      EXPECT_GT(gdev, 0.0) << name << " " << to_string(p) << ": storage must round";
    }
  }
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// A model with every kind of layer: Linear, GELU, LayerNorm, Dropout,
// Linear, Tanh, Linear, Sigmoid, Linear, ReLU, Linear to `classes`.
Sequential<float> every_layer_kind(std::size_t in, std::size_t width, std::size_t classes) {
  Sequential<float> m(in);
  m.add(std::make_unique<Linear<float>>(in, width));
  m.add(make_activation<float>(ActivationKind::gelu));
  m.add(std::make_unique<LayerNorm<float>>(width));
  m.add(std::make_unique<Dropout<float>>(0.25, 3));
  for (ActivationKind a : {ActivationKind::tanh, ActivationKind::sigmoid, ActivationKind::relu}) {
    m.add(std::make_unique<Linear<float>>(width, width));
    m.add(make_activation<float>(a));
  }
  m.add(std::make_unique<Linear<float>>(width, classes));
  return m;
}

// Small host kernels run inline on the calling thread (backends/launch.hpp).
// Training every kind of layer, the loss and Adam for a few steps inline and
// as Kokkos kernels on all threads must give bitwise the same parameters
// (each item's arithmetic is the same; only the reported loss, a sum, may be
// added in another order). Shapes are above and below inline_work_limit.
// segment_sums (backends/segment_sums.hpp) against a naive sum in double:
// each segment's K = 2 sums (of v and of v^2) over outer x inner terms, both
// layouts, on shapes whose blocks end mid-row, span rows, or hold a single
// partial; and the same bits inline and through Kokkos with every thread.
// Bound: a sum of n doubles in any order is within (n - 1) 2^-53 sum |t| of
// the exact one, and the naive sum too: 2 n 2^-53 sum |t| covers both.
// The sums of v and v^2 per segment of `a` (S segments of outer x inner
// terms, laid out as `layout` says) through segment_sums. A free function:
// CUDA refuses extended lambdas in gtest's private TestBody.
std::vector<double> segment_sums_of(Terms layout, Kokkos::View<float*, MemSpace> a, std::size_t S,
                                    std::size_t outer, std::size_t inner, bool inline_ok) {
  Context ctx;
  ctx.inline_ok = inline_ok;
  const std::size_t terms = outer * inner;
  Kokkos::View<double*, MemSpace> out("out", 2 * S);
  Kokkos::View<double*, MemSpace> work(
      "work", std::max<std::size_t>(segment_sums_workspace(S, terms, 2), 1));
  const bool by_segment = layout == Terms::contiguous;
  segment_sums<2>(ctx, "test::partials", "test::sums", layout, S, outer, inner, work.data(),
      KOKKOS_LAMBDA(std::size_t s, std::size_t o, std::size_t i, double* acc) {
        const std::size_t j = o * inner + i;
        const double t = a(by_segment ? s * terms + j : j * S + s);
        acc[0] += t;
        acc[1] += t * t;
      },
      KOKKOS_LAMBDA(std::size_t s, const double* total) {
        out(2 * s) = total[0];
        out(2 * s + 1) = total[1];
      });
  Kokkos::fence();
  return test::to_host(out);
}

TEST(SegmentSums, MatchANaiveDoubleSumInBothLayoutsAndAnyThreadCount) {
  struct Case {
    std::size_t segments, outer, inner;
  };
  for (const Case c : {Case{3, 7, 5}, Case{2, 1000, 3}, Case{5, 1, 4099}, Case{4, 128, 784},
                       Case{1, 0, 3}, Case{33, 2, 1}}) {
    const std::size_t S = c.segments, terms = c.outer * c.inner;
    const std::vector<float> v = test::randn<float>(std::max<std::size_t>(S * terms, 1), 5 + S);
    // Contiguous: segment s holds its terms side by side ([s][o][i]);
    // interleaved: term (o, i) of every segment side by side ([o][i][s]).
    auto contiguous = test::to_device(v);
    std::vector<float> vi(v.size());
    for (std::size_t s = 0; s < S; ++s)
      for (std::size_t j = 0; j < terms; ++j) vi[j * S + s] = v[s * terms + j];
    auto interleaved = test::to_device(vi);
    for (const Terms layout : {Terms::contiguous, Terms::interleaved}) {
      auto a = layout == Terms::contiguous ? contiguous : interleaved;
      auto run = [&](bool inline_ok) {
        return segment_sums_of(layout, a, S, c.outer, c.inner, inline_ok);
      };
      const std::vector<double> got = run(false);
      EXPECT_EQ(run(true), got) << "inline and launched differ";
      for (std::size_t s = 0; s < S; ++s) {
        double sum = 0, squares = 0, abs_sum = 0;
        for (std::size_t j = 0; j < terms; ++j) {
          const double t = v[s * terms + j];
          sum += t;
          squares += t * t;
          abs_sum += std::abs(t);
        }
        const double bound = 2.0 * static_cast<double>(terms) * std::ldexp(1.0, -53);
        EXPECT_LE(std::abs(got[2 * s] - sum), bound * abs_sum) << "segment " << s << " of " << S;
        EXPECT_LE(std::abs(got[2 * s + 1] - squares), bound * squares) << "segment " << s;
      }
    }
  }
}

// The host visits a contiguous segment's partials row by row where its rows
// lie apart (backends/segment_sums.hpp); a device runs one item per partial.
// Both must give the same bits: segment_sums (any build, launched and
// inline) against the per-partial order computed here on the host, then the
// partials added in order as stage 2 does. Shapes: partials that end
// mid-row and span rows, one row, more segments than one block of the row
// visit, and partials left without terms.
struct ContiguousCase {
  std::size_t segments, outer, inner;
};
const std::vector<ContiguousCase> contiguous_cases = {
    {4, 128, 784}, {3, 7, 5}, {2, 1000, 3}, {70, 9, 13}, {5, 1, 4099},
    {33, 2, 1},    {2, 3, 1}, {1, 4000, 1}, {3, 64, 49}};

TEST(SegmentSums, HostRowOrderGivesTheBitsOfThePerPartialOrder) {
  for (const ContiguousCase c : contiguous_cases) {
    const std::size_t S = c.segments, terms = c.outer * c.inner;
    const std::vector<float> v = test::randn<float>(S * terms, 9 + S);
    const std::size_t P = segment_partials(S, terms), L = (terms + P - 1) / P;
    std::vector<double> want(2 * S, 0.0);
    for (std::size_t s = 0; s < S; ++s)
      for (std::size_t p = 0; p < P; ++p) {
        double part[2];
        detail::contiguous_partial<2>(
            [&](std::size_t seg, std::size_t o, std::size_t i, double* acc) {
              const double t = v[seg * terms + o * c.inner + i];
              acc[0] += t;
              acc[1] += t * t;
            },
            s, p, L, terms, c.inner, part);
        want[2 * s] += part[0];
        want[2 * s + 1] += part[1];
      }
    auto a = test::to_device(v);
    const std::string shape = std::to_string(S) + " x " + std::to_string(c.outer) + " x " +
                              std::to_string(c.inner);
    EXPECT_EQ(segment_sums_of(Terms::contiguous, a, S, c.outer, c.inner, false), want) << shape;
    EXPECT_EQ(segment_sums_of(Terms::contiguous, a, S, c.outer, c.inner, true), want) << shape;
  }
}

// segment_total (one segment's totals on a host thread) with a term that
// adds four terms at once into the lanes of one vector (Term::four,
// backends/lanes.hpp) against the same term one at a time, and both
// against the per-partial order: the same bits. Shapes: runs shorter than
// four, runs that end mid-vector at a row's end, partials across rows.
TEST(SegmentSums, FourLanesGiveTheBitsOfTheScalarTerms) {
  if (!host_kernels) GTEST_SKIP() << "host terms";
  struct Scalar {
    const float* v;
    std::size_t terms, inner;
    void operator()(std::size_t seg, std::size_t o, std::size_t i, double* acc) const {
      const double t = v[seg * terms + o * inner + i];
      acc[0] += t;
      acc[1] += t * t;
    }
  };
  struct Four : Scalar {
    void four(std::size_t seg, std::size_t o, std::size_t i, Lanes4* acc) const {
      Lanes4 t;
      load_wide(t, v + seg * terms + o * inner + i);
      acc[0] += t;
      acc[1] += t * t;
    }
  };
  static_assert(detail::has_four<Four>::value && !detail::has_four<Scalar>::value);
  for (const ContiguousCase c : contiguous_cases) {
    const std::size_t S = c.segments, terms = c.outer * c.inner;
    const std::vector<float> v = test::randn<float>(S * terms, 19 + S);
    const Scalar scalar{v.data(), terms, c.inner};
    const Four four{{v.data(), terms, c.inner}};
    const std::size_t P = segment_partials(S, terms), L = (terms + P - 1) / P;
    for (std::size_t s = 0; s < S; ++s) {
      double want[2] = {0, 0}, one[2], lanes[2];
      for (std::size_t p = 0; p < P; ++p) {
        double part[2];
        detail::contiguous_partial<2>(scalar, s, p, L, terms, c.inner, part);
        want[0] += part[0];
        want[1] += part[1];
      }
      segment_total<2>(scalar, s, S, c.outer, c.inner, one);
      segment_total<2>(four, s, S, c.outer, c.inner, lanes);
      const std::string at = std::to_string(S) + " x " + std::to_string(c.outer) + " x " +
                             std::to_string(c.inner) + ", segment " + std::to_string(s);
      for (int k : {0, 1}) {
        EXPECT_EQ(std::memcmp(&one[k], &want[k], sizeof(double)), 0) << at << ": " << one[k] << " " << want[k];
        EXPECT_EQ(std::memcmp(&lanes[k], &want[k], sizeof(double)), 0) << at << ": " << lanes[k] << " " << want[k];
      }
    }
  }
}

TEST(InlineKernels, TrainingIsBitwiseTheSameAsKernelLaunches) {
  if (!host_kernels) GTEST_SKIP() << "kernels run on a device: nothing runs inline";
  for (std::size_t width : {std::size_t(8), std::size_t(600)}) {
    const std::size_t batch = 40, in = 12, classes = 5;
    auto train = [&](bool inline_kernels) {
      Context ctx;
      ctx.inline_ok = inline_kernels;
      if (inline_kernels) ctx.threads = 1;  // everything inline, whatever the size
      EXPECT_EQ(runs_inline(ctx, std::size_t(1) << 30), inline_kernels);
      Sequential<float> m = every_layer_kind(in, width, classes);
      m.build(batch);
      m.init(Init::kaiming_uniform, 21);
      m.set_training(true);
      OptimizerConfig oc;
      oc.kind = OptimizerKind::adamw;
      oc.lr = 1e-2;
      oc.weight_decay = 0.01;
      Optimizer<float> opt(oc, m.num_params());
      SoftmaxCrossEntropy<float> loss;
      auto x = test::to_device(test::randn<float>(batch * in, 8), batch, in);
      std::vector<std::int32_t> lab(batch);
      for (std::size_t i = 0; i < batch; ++i) lab[i] = static_cast<std::int32_t>((i * 3) % classes);
      LabelsBuffer labels("labels", batch);
      auto hl = Kokkos::create_mirror_view(labels);
      for (std::size_t i = 0; i < batch; ++i) hl(i) = lab[i];
      Kokkos::deep_copy(labels, hl);
      Targets<float> t;
      t.labels = labels;
      double last = 0;
      for (int step = 0; step < 3; ++step) {
        m.zero_grad(ctx);
        auto out = m.forward(ctx, x);
        last = loss.forward_backward(ctx, out, t, m.output_grad(), 1.0f / batch).value();
        m.backward(ctx);
        opt.step(ctx, m.params(), m.grads());
      }
      ctx.exec.fence();
      return std::make_pair(test::to_host(m.params()), last);
    };
    const auto [p_inline, loss_inline] = train(true);
    const auto [p_kernel, loss_kernel] = train(false);
    ASSERT_EQ(p_inline.size(), p_kernel.size());
    std::size_t differ = 0;
    for (std::size_t i = 0; i < p_inline.size(); ++i) differ += p_inline[i] != p_kernel[i];
    EXPECT_EQ(differ, 0u) << "width " << width << ": parameters differ between inline and launched kernels";
    EXPECT_NEAR(loss_inline, loss_kernel, 1e-9 * batch) << "width " << width;
  }
}

// Outside the TEST body: CUDA refuses extended lambdas in gtest's private
// TestBody.
VectorBuffer<int> count_zero_work_items(const Context& ctx, std::size_t n) {
  VectorBuffer<int> hits("hits", n);
  int* h = hits.data();
  for_range(ctx, "strata::test::zero_work", n, KOKKOS_LAMBDA(const std::size_t i) { h[i] += 1; }, 0);
  return hits;
}

TEST(InlineKernels, DecisionFollowsThreadsAndWork) {
  if (!host_kernels) GTEST_SKIP() << "kernels run on a device: nothing runs inline";
  Context ctx;
  ctx.inline_ok = true;
  ctx.threads = 2;
  EXPECT_TRUE(runs_inline(ctx, inline_work_limit - 1));
  EXPECT_FALSE(runs_inline(ctx, inline_work_limit));
  ctx.threads = 1;
  EXPECT_TRUE(runs_inline(ctx, inline_work_limit * 100));
  ctx.inline_ok = false;
  EXPECT_FALSE(runs_inline(ctx, 1));
  // Items of no work (a Linear's bias gradient over a shard of 0 rows) launch
  // too: every item runs once, nothing divides by zero.
  EXPECT_EQ(test::to_host(count_zero_work_items(ctx, 5)), std::vector<int>(5, 1));
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// Records what the GEMMs of a layer at its position would be told about
// their operands (Blas::float_inputs) in forward and backward; passes
// values through.
class GemmInputsProbe final : public Layer<float> {
 public:
  std::string name() const override { return "Probe"; }
  Shape output_shape(const Shape& in) const override { return in; }
  void forward(Context& ctx, ConstMatrix<float> x, Matrix<float> y, Saved<float>&) override {
    seen.push_back(ctx.blas.float_inputs());
    Kokkos::deep_copy(ctx.exec, y, x);
  }
  void backward(Context& ctx, ConstMatrix<float> dy, Matrix<float> dx, Saved<float>&) override {
    seen.push_back(ctx.blas.float_inputs());
    if (dx.data() != nullptr) Kokkos::deep_copy(ctx.exec, dx, dy);
  }
  std::vector<Precision> seen;
};

// A layer with parameters that implements the core alone (no capability).
class PlainScale final : public Layer<float> {
 public:
  std::string name() const override { return "PlainScale"; }
  Shape output_shape(const Shape& in) const override { return in; }
  std::vector<ParamSpec> params() const override {
    return {{"weight", Shape{2, 3}, ParamGroup::decay, ParamInit::constant(2)},
            {"bias", Shape{3}, ParamGroup::no_decay, ParamInit::normal(0.5)}};
  }
  void bind(Vector<float> params, Vector<float> grads) override { bound = slices(params, grads); }
  void forward(Context& ctx, ConstMatrix<float> x, Matrix<float> y, Saved<float>&) override {
    Kokkos::deep_copy(ctx.exec, y, x);
  }
  void backward(Context& ctx, ConstMatrix<float> dy, Matrix<float> dx, Saved<float>&) override {
    if (dx.data() != nullptr) Kokkos::deep_copy(ctx.exec, dx, dy);
  }
  std::vector<ParamSlice<float>> bound;
};

// The declared list gives the count, the table (offsets in order), the
// slices bind keeps and the initial values: counter i of the layer's stream
// for value i of its slice, drawn here from the generator directly.
TEST(LayerCore, DeclaredParametersGiveTableSlicesAndInit) {
  PlainScale l;
  EXPECT_EQ(l.num_params(), 9u);
  const auto table = l.param_table();
  ASSERT_EQ(table.size(), 2u);
  EXPECT_EQ(table[0].name, "weight");
  EXPECT_EQ(table[0].offset, 0u);
  EXPECT_EQ(table[0].group, ParamGroup::decay);
  EXPECT_EQ(table[1].name, "bias");
  EXPECT_EQ(table[1].offset, 6u);
  EXPECT_EQ(table[1].group, ParamGroup::no_decay);
  std::vector<float> host(9, -1.0f);
  const std::uint64_t seed = 11, index = 4;
  l.init(HostVector<float>(host.data(), host.size()), Init::kaiming_uniform, seed, index);
  for (std::size_t i = 0; i < 6; ++i) EXPECT_EQ(host[i], 2.0f) << i;
  for (std::size_t i = 6; i < 9; ++i)
    EXPECT_EQ(host[i], static_cast<float>(random::normal(seed, random::stream_init + index, i) * 0.5))
        << i;
  VectorBuffer<float> p("p", 9), g("g", 9);
  l.bind(p, g);
  ASSERT_EQ(l.bound.size(), 2u);
  EXPECT_EQ(l.bound[0].value.data(), p.data());
  EXPECT_EQ(l.bound[0].value_matrix().extent(0), 2u);
  EXPECT_EQ(l.bound[0].value_matrix().extent(1), 3u);
  EXPECT_EQ(l.bound[1].grad.data(), g.data() + 6);
  EXPECT_EQ(l.bound[1].grad.extent(0), 3u);
}

// Capabilities reach layers inside blocks (for_each_layer), and a layer
// with parameters that does not declare ExactSums is refused by
// --reproducible, named with the block around it.
TEST(LayerCore, CapabilitiesReachLayersInsideBlocks) {
  auto make = [](bool plain) {
    std::vector<LayerPtr<float>> inner;
    inner.push_back(std::make_unique<Dropout<float>>(0.5, 1));
    if (plain) inner.push_back(std::make_unique<PlainScale>());
    else inner.push_back(std::make_unique<Linear<float>>(3, 3));
    std::vector<LayerPtr<float>> outer;
    outer.push_back(std::make_unique<Block<float>>(std::move(inner), false));
    return std::make_unique<Block<float>>(std::move(outer), true);
  };
  auto with_plain = make(true), with_linear = make(false);
  const std::string issue = reproducibility_issue(*with_plain);
  EXPECT_NE(issue.find("PlainScale does not sum its gradients exactly yet"), std::string::npos) << issue;
  EXPECT_EQ(reproducibility_issue(*with_linear), "");
  auto& dropout = static_cast<Block<float>&>(with_plain->layer(0)).layer(0);
  EXPECT_TRUE(dropout.training());
  set_training(*with_plain, false);
  EXPECT_FALSE(dropout.training());
  // Defaults of a layer without the capability, and a layer's own answer.
  PlainScale plain;
  EXPECT_EQ(tensor_split(plain), TensorSplit::none);
  EXPECT_EQ(tied_to(plain), "");
  EXPECT_TRUE(buffer_table(plain).empty());
  EXPECT_EQ(tensor_split(Linear<float>(3, 3)), TensorSplit::linear);
  EXPECT_EQ(buffer_table(dropout).size(), 1u);
  // Buffers of inner layers are the block's, named by their path.
  const auto buffers = buffer_table(*with_plain);
  ASSERT_EQ(buffers.size(), 1u);
  EXPECT_EQ(buffers[0].name, "0.0.calls");
}

// Everything a model is built for is given to build() at once
// (BuildOptions: batch, slots, padding, numerics) and checked there: a
// contradiction is a config error naming it, a second build() is refused,
// and the model reports the numerics it was built with. The oracle: the
// rules of layers/build_options.hpp, and the padded size written out.
TEST(BuildOptions, GivenOnceAndChecked) {
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.message();
    }
    return std::string("(no error)");
  };
  auto plain_model = [] {
    Sequential<float> m(3);
    m.add(std::make_unique<Linear<float>>(3, 3));
    m.add(std::make_unique<PlainScale>(), "scale");
    return m;
  };
  BuildOptions exact;
  exact.max_batch = 4;
  exact.numerics.exact_chunk = 2;
  EXPECT_NE(message([&] { plain_model().build(exact); })
                .find("--reproducible: layer scale (PlainScale) does not sum its gradients exactly"),
            std::string::npos);
  BuildOptions inner;
  inner.max_batch = 4;
  inner.numerics.inner_chunk = 8;
  EXPECT_EQ(message([&] { make_mlp<float>({{3, 2}}).build(inner); }),
            "--tp-chunk applies to --reproducible runs");
  BuildOptions bf16;
  bf16.max_batch = 4;
  bf16.numerics.storage = Precision::bf16;
  EXPECT_EQ(message([&] { make_mlp<double>({{3, 2}}).build(bf16); }),
            "bf16 storage needs a float model");
  EXPECT_EQ(message([&] { make_mlp<double>({{3, 2}}).build(exact); }),
            "--reproducible trains float models");

  // 3 x 5 + 5 + 5 x 2 + 2 = 32 parameters, padded to a multiple of 6: 36.
  auto m = make_mlp<float>({{3, 5, 2}});
  BuildOptions b = exact;
  b.pad_multiple = 6;
  b.numerics.storage = Precision::bf16;
  m.build(b);
  EXPECT_EQ(m.num_params(), 32u);
  EXPECT_EQ(m.padded_grads().extent(0), 36u);
  EXPECT_EQ(m.exact_grads().extent(0), 72u) << "two doubles per padded value";
  EXPECT_EQ(m.numerics().exact_chunk, 2u);
  EXPECT_EQ(m.numerics().storage, Precision::bf16);
  EXPECT_TRUE(m.storage16());
  EXPECT_NE(message([&] { m.build(b); }).find("build() twice"), std::string::npos);
  auto fp32 = make_mlp<float>({{3, 2}});
  fp32.build(4);
  EXPECT_FALSE(fp32.numerics().exact());
  EXPECT_EQ(fp32.exact_grads().extent(0), 0u);
}

// Once told that its working weights are rounded, Sequential declares the
// storage precision to the GEMMs of every layer but the first (which reads
// the data, not rounded), in forward and backward, and leaves the Blas as it
// found it; a 16-bit storage alone declares nothing.
TEST(Storage16, GemmsAfterTheFirstLayerAreToldTheirOperandsAre16Bit) {
  for (Precision p : {Precision::fp32, Precision::bf16, Precision::fp16})
  for (bool rounded : {false, true}) {
    Sequential<float> m(4);
    auto first = std::make_unique<GemmInputsProbe>();
    auto third = std::make_unique<GemmInputsProbe>();
    GemmInputsProbe *a = first.get(), *b = third.get();
    m.add(std::move(first));
    m.add(std::make_unique<Linear<float>>(4, 4));
    m.add(std::move(third));
    m.build(stored(3, p));
    m.init(Init::kaiming_uniform, 1);
    m.set_weights_rounded(rounded);
    Context ctx;
    m.forward(ctx, test::to_device(test::randn<float>(12, 2), 3, 4));
    m.backward(ctx);
    ctx.exec.fence();
    EXPECT_EQ(a->seen, std::vector<Precision>(2, Precision::fp32)) << to_string(p);
    EXPECT_EQ(b->seen, std::vector<Precision>(2, rounded ? p : Precision::fp32)) << to_string(p);
    EXPECT_EQ(ctx.blas.float_inputs(), Precision::fp32) << to_string(p);
  }
}


// Real 16-bit activation storage (Numerics::storage, 16-bit buffers of
// the kept outputs, float scratch buffers) against the emulated storage
// (float buffers holding the rounded values): the layers see the same values,
// so training must be bitwise the same. Every kind of layer, bf16 and fp16,
// three micro-batch slots of different sizes in flight (all forwards, then
// all backwards, as GPipe does), the loss gradient scaled by 1024 and
// unscaled by the fused step that keeps fp32 master weights, 4 steps; then
// an evaluation forward. Also: the fp32 run differs (the storage rounds).
TEST(Storage16, TrainingIsBitwiseTheSameAsEmulatedStorage) {
  const std::size_t in = 12, width = 24, classes = 5, slots = 3, steps = 4;
  const std::size_t rows[slots] = {7, 5, 6};
  Context ctx;
  std::vector<MatrixBuffer<float>> xs;
  std::vector<LabelsBuffer> labels;
  for (std::size_t s = 0; s < slots; ++s) {
    xs.push_back(test::to_device(test::randn<float>(rows[s] * in, 30 + s), rows[s], in));
    labels.emplace_back("labels", rows[s]);
    auto h = Kokkos::create_mirror_view(labels.back());
    for (std::size_t i = 0; i < rows[s]; ++i) h(i) = static_cast<std::int32_t>((i * 7 + s) % classes);
    Kokkos::deep_copy(labels.back(), h);
  }
  struct Result {
    std::vector<float> params, eval;
    std::vector<double> losses;
  };
  auto train = [&](Precision p, bool emulated) {
    Sequential<float> m = every_layer_kind(in, width, classes);
    m.build(stored(8, p, emulated, slots));
    m.init(Init::kaiming_uniform, 21);
    EXPECT_EQ(m.storage16(), p != Precision::fp32 && !emulated);
    OptimizerConfig oc;
    oc.kind = OptimizerKind::adam;
    oc.lr = 1e-2;
    Optimizer<float> opt(oc, m.num_params());
    VectorBuffer<float> master("master", m.num_params());
    Kokkos::deep_copy(master, m.params());
    round_in_place(ctx.exec, p, m.params());
    SoftmaxCrossEntropy<float> loss;
    Result r;
    for (std::size_t step = 0; step < steps; ++step) {
      m.zero_grad(ctx);
      m.set_training(true);
      for (std::size_t s = 0; s < slots; ++s) {
        m.set_row_offset(s * 8);
        auto out = m.forward(ctx, xs[s], s, s == 0);
        Targets<float> t;
        t.labels = labels[s];
        r.losses.push_back(loss.forward_backward(ctx, out, t, m.output_grad(s), 1024.0f / 18).value());
      }
      for (std::size_t s = 0; s < slots; ++s) m.backward(ctx, {}, s);
      FusedStep f;
      f.inv_scale = 1.0 / 1024;
      f.copy_rounded = m.params();
      f.copy_precision = p;
      EXPECT_TRUE(opt.step_fused(ctx, master, m.grads(), f).applied);
    }
    m.set_training(false);
    r.eval = test::to_host(m.forward(ctx, xs[0]));
    r.params = test::to_host(Vector<float>(master));
    return r;
  };
  const Result fp32 = train(Precision::fp32, false);
  for (Precision p : {Precision::bf16, Precision::fp16}) {
    const Result emulated = train(p, true), real = train(p, false);
    std::size_t differ = 0;
    for (std::size_t i = 0; i < real.params.size(); ++i) differ += real.params[i] != emulated.params[i];
    EXPECT_EQ(differ, 0u) << to_string(p) << ": parameters differ from the emulated storage's";
    EXPECT_EQ(real.losses, emulated.losses) << to_string(p);
    EXPECT_EQ(real.eval, emulated.eval) << to_string(p);
    EXPECT_NE(real.params, fp32.params) << to_string(p) << ": the storage must round";
  }
}

// Backward needs the activations of a training forward: after an evaluation
// forward, 16-bit storage kept none and says so.
TEST(Storage16, BackwardAfterAnEvaluationForwardIsAnError) {
  Sequential<float> m(4);
  m.add(std::make_unique<Linear<float>>(4, 6));
  m.add(make_activation<float>(ActivationKind::relu));
  m.add(std::make_unique<Linear<float>>(6, 2));
  m.build(stored(3, Precision::bf16));
  Context ctx;
  auto x = test::to_device(test::randn<float>(12, 2), 3, 4);
  m.set_training(false);
  m.forward(ctx, x);
  EXPECT_THROW(m.backward(ctx), Error);
  m.set_training(true);
  m.forward(ctx, x);
  EXPECT_NO_THROW(m.backward(ctx));
}

// A numerical failure is traced to the first layer whose output overflowed:
// with fp16 storage a Linear output of 5e5 is Inf. The emulated storage
// names the Linear; the 16-bit storage did not keep the Linear's output (ReLU
// reads its own output, and the last layer's output took the Linear's
// scratch), so it names the ReLU and says that the Linear was not checked.
TEST(Storage16, FirstNonFiniteNamesTheOverflowingLayer) {
  for (bool emulated : {true, false}) {
    Sequential<float> m(4);
    m.add(std::make_unique<Linear<float>>(4, 6));
    m.add(make_activation<float>(ActivationKind::relu));
    m.add(std::make_unique<Linear<float>>(6, 2));
    m.build(stored(3, Precision::fp16, emulated));
    std::vector<float> p(m.num_params(), 0.01f);
    for (std::size_t i = 0; i < 4 * 6 + 6; ++i) p[i] = 1e5f;  // layer 0: weights and bias
    Kokkos::deep_copy(m.params(), test::to_device(p));
    Context ctx;
    auto x = test::to_device(std::vector<float>(12, 1.0f), 3, 4);
    m.zero_grad(ctx);
    m.forward(ctx, x);
    Kokkos::deep_copy(m.output_grad(), 1.0f);
    m.backward(ctx);
    EXPECT_EQ(m.first_nonfinite(ctx),
              emulated ? "the output of layer 0 (Linear(4, 6))"
                       : "the output of layer 1 (ReLU) (or of layer 0 (Linear(4, 6)), not kept "
                         "by 16-bit storage)");
  }
}

// Activation memory: the accounting (activation_bytes, known before build)
// equals the sizes of the views build() allocates, for fp32, emulated and
// real 16-bit storage and 1 or 3 slots; and on a W3-shaped MLP (4 x (Linear,
// ReLU), Linear to 10 classes; width 512 here to keep the test small) real
// bf16 storage allocates what the layout promises: per row and slot the four
// ReLU outputs in 2 bytes (the Linear outputs are not kept: ReLU's backward
// reads its output, Linear's its input), plus two float scratch buffers,
// against every output in 4 bytes with fp32.
TEST(Storage16, AllocatedActivationBytesGoDown) {
  const std::size_t w = 512, classes = 10, batch = 8;
  for (std::size_t slots : {std::size_t(1), std::size_t(3)}) {
    std::size_t fp32 = 0, bf16 = 0;
    for (int mode = 0; mode < 3; ++mode) {
      auto m = make_mlp<float>({{w, w, w, w, w, classes}});
      const Precision p = mode == 0 ? Precision::fp32 : Precision::bf16;
      const BuildOptions b = stored(batch, p, mode == 1, slots);
      const std::size_t promised = m.activation_bytes(b);
      m.build(b);
      EXPECT_EQ(m.allocated_activation_bytes(), promised) << "mode " << mode << ", slots " << slots;
      if (mode == 0) fp32 = m.allocated_activation_bytes();
      if (mode == 1) EXPECT_EQ(m.allocated_activation_bytes(), fp32) << "emulated: float buffers";
      if (mode == 2) bf16 = m.allocated_activation_bytes();
    }
    const std::size_t grads = (slots * batch * classes + 2 * batch * w) * 4;  // dout, dx ping-pong
    EXPECT_EQ(fp32, slots * batch * (8 * w + classes) * 4 + grads);
    EXPECT_EQ(bf16, slots * batch * 4 * w * 2 + 2 * batch * w * 4 + grads);
    std::printf("W3-shaped, width %zu, batch %zu, %zu slots: activations fp32 %zu bytes, bf16 %zu (%.0f%%)\n",
                w, batch, slots, fp32, bf16, 100.0 * bf16 / fp32);
  }
}

}  // namespace
}  // namespace strata
