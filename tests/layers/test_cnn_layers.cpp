// The image layers (Conv2d, pooling, BatchNorm, Flatten) against naive host
// references written from PyTorch's definitions (forward), and against
// central finite differences in double precision (input and parameter
// gradients), over stride, padding, dilation and groups edge cases and odd
// sizes; bad shapes and options as clear errors.
#include "backends/error.hpp"
#include "backends/launch.hpp"
#include "layers/activation.hpp"
#include "layers/batchnorm.hpp"
#include "layers/conv2d.hpp"
#include "layers/conv_unfold.hpp"
#include "layers/flatten.hpp"
#include "layers/pool2d.hpp"
#include "layers/linear.hpp"
#include "layers/registry.hpp"
#include "layers/sequential.hpp"
#include "layer_harness.hpp"
#include "test_utils.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace strata {
namespace {

using test::Bound;
using test::Vec;
using test::check_gradients;
using test::expect_near;

Window2d window(std::size_t kh, std::size_t kw, std::size_t s = 1, std::size_t p = 0,
                std::size_t d = 1) {
  Window2d w;
  w.kh = kh, w.kw = kw, w.sh = w.sw = s, w.ph = w.pw = p, w.dh = w.dw = d;
  return w;
}

// ------------------------------------------------------------------ Conv2d
struct ConvCase {
  std::size_t batch, c, h, w, out;
  Window2d win;
  std::size_t groups;
  bool bias;
};

// Direct convolution: y[b][o][oh][ow] = bias[o] + sum over the group's input
// channels and the kernel of W[o][c][kh][kw] x[b][c][ih][iw] (zero padding).
Vec conv_reference(const ConvCase& k, const Vec& x, const Vec& p) {
  const auto& w = k.win;
  const std::size_t oh = (k.h + 2 * w.ph - w.dh * (w.kh - 1) - 1) / w.sh + 1;
  const std::size_t ow = (k.w + 2 * w.pw - w.dw * (w.kw - 1) - 1) / w.sw + 1;
  const std::size_t cg = k.c / k.groups, og = k.out / k.groups;
  const std::size_t nw = k.out * cg * w.kh * w.kw;
  Vec y(k.batch * k.out * oh * ow);
  for (std::size_t b = 0; b < k.batch; ++b)
    for (std::size_t o = 0; o < k.out; ++o)
      for (std::size_t i = 0; i < oh; ++i)
        for (std::size_t j = 0; j < ow; ++j) {
          double s = k.bias ? p[nw + o] : 0.0;
          const std::size_t g = o / og;
          for (std::size_t c = 0; c < cg; ++c)
            for (std::size_t a = 0; a < w.kh; ++a)
              for (std::size_t e = 0; e < w.kw; ++e) {
                const long ih = long(i * w.sh + a * w.dh) - long(w.ph);
                const long iw = long(j * w.sw + e * w.dw) - long(w.pw);
                if (ih < 0 || iw < 0 || ih >= long(k.h) || iw >= long(k.w)) continue;
                s += p[((o * cg + c) * w.kh + a) * w.kw + e] *
                     x[((b * k.c + g * cg + c) * k.h + ih) * k.w + iw];
              }
          y[((b * k.out + o) * oh + i) * ow + j] = s;
        }
  return y;
}

// workspace_limit > 0: the chunks algorithm with chunks of that many values.
LayerPtr<double> make_conv(const ConvCase& k, std::size_t workspace_limit = 0) {
  auto conv = std::make_unique<Conv2d<double>>(k.c, k.out, k.win, k.groups, k.bias);
  if (workspace_limit > 0) {
    conv->set_workspace_limit(workspace_limit);
    conv->set_algorithm(ConvAlgorithm::chunks);
  }
  return conv;
}

std::vector<ConvCase> conv_cases() {
  Window2d asym = window(3, 2, 1, 0);
  asym.ph = 2, asym.pw = 1, asym.sh = 2, asym.sw = 1;
  Window2d dil = window(3, 3, 1, 2, 2);
  dil.dw = 1;
  // Unit strides with as many output as input columns (the shifted-plane
  // unfold): rows padded less than "same", rows padded beyond the kernel,
  // dilation 2 with "same" padding.
  Window2d narrow = window(3, 3, 1, 1);
  narrow.ph = 0;
  Window2d tall = window(5, 1, 1, 0);
  tall.ph = 3;
  const Window2d dil_same = window(3, 3, 1, 2, 2);
  return {
      {2, 1, 5, 5, 3, window(3, 3), 1, true},             // valid convolution
      {3, 2, 7, 6, 4, window(3, 3, 1, 1), 1, true},       // "same" padding, odd sizes
      {2, 3, 9, 8, 2, window(3, 3, 2, 1), 1, false},      // stride 2, no bias
      {2, 2, 6, 7, 3, asym, 1, true},                     // per-axis kernel, stride, padding
      {2, 2, 9, 7, 2, dil, 1, true},                      // dilation 2 (rows), padding 2
      {2, 4, 5, 5, 6, window(3, 3, 1, 1), 2, true},       // groups 2
      {3, 3, 5, 4, 3, window(3, 3, 1, 1), 3, true},       // depthwise (groups = channels)
      {2, 3, 4, 4, 5, window(1, 1), 1, true},             // 1x1
      {1, 1, 3, 3, 1, window(3, 3), 1, true},             // output 1x1
      {2, 2, 2, 3, 2, window(1, 1, 3, 0), 1, false},      // stride larger than the image
      {2, 2, 6, 5, 3, narrow, 1, true},                   // padding (0, 1): output rows H - 2
      {2, 1, 4, 3, 2, tall, 1, true},                     // 5x1, padding (3, 0): empty rows
      {2, 2, 7, 6, 2, dil_same, 1, false},                // dilation 2, padding 2 ("same")
      {1, 2, 3, 1, 2, window(3, 3, 1, 1), 1, true},       // one column: every kw but the centre empty
  };
}

TEST(Conv2d, ForwardMatchesDirectConvolution) {
  for (GemmBackend gemm : {GemmBackend::portable, GemmBackend::vendor}) {
    if (gemm == GemmBackend::vendor && !Blas::vendor_available()) continue;
    std::size_t seed = 1;
    for (const ConvCase& k : conv_cases()) {
      Bound b(make_conv(k), k.batch, Shape{k.c, k.h, k.w}, ++seed, gemm);
      const Vec x = test::randn<double>(k.batch * k.c * k.h * k.w, seed + 50);
      // Sums of at most 4 x 9 products of N(0, 1) values in double.
      expect_near(b.forward(x), conv_reference(k, x, b.param_values()), 1e-12,
                  b.layer->name() + " forward (" + to_string(gemm) + ")");
    }
  }
}

// The per-value unfold and fold that a device runs (one thread per patch
// entry, one per input pixel) against the row forms the host runs, on the
// host: the same values, bit for bit, for every window of conv_cases (both
// forms copy the same pixels, and add a pixel's patch entries to zero in
// kernel order).
TEST(Conv2d, PerValueUnfoldAndFoldMatchTheRowForms) {
  using conv_unfold::I;
  std::size_t seed = 300;
  for (const ConvCase& k : conv_cases()) {
    const auto& w = k.win;
    const std::size_t oh = w.out_h(k.h), ow = w.out_w(k.w);
    const conv_unfold::ConvGeometry g = conv_unfold::geometry(w, k.c, k.h, k.w, oh, ow);
    const I P = g.OH * g.OW, K = g.KH * g.KW, HW = g.H * g.W;
    const Vec x = test::randn<double>(k.c * k.h * k.w, ++seed);
    Vec rows(static_cast<std::size_t>(g.C * K * P)), values(rows.size());
    conv_unfold::unfold_sample(g, x.data(), rows.data());
    for (I ck = 0; ck < g.C * K; ++ck)
      for (I p = 0; p < P; ++p)
        values[ck * P + p] = conv_unfold::unfold_value(g, x.data() + ck / K * HW, ck % K / g.KW,
                                                       ck % g.KW, p);
    EXPECT_EQ(values, rows) << "unfold, case " << seed;

    Vec col = test::randn<double>(rows.size(), ++seed), folded(x.size()), summed(x.size());
    for (I c = 0; c < g.C; ++c)
      for (I ih = 0; ih < g.H; ++ih)
        for (I iw = 0; iw < g.W; ++iw)
          summed[c * HW + ih * g.W + iw] =
              conv_unfold::fold_value(g, col.data() + c * K * P, P, ih, iw);
    conv_unfold::fold_sample(g, col.data(), folded.data());  // zeroes col's wrapped entries
    EXPECT_EQ(summed, folded) << "fold, case " << seed;
  }
}

TEST(Conv2d, ChunksOfOneSampleGiveTheSameResult) {
  const ConvCase k{5, 3, 6, 5, 4, window(3, 3, 1, 1), 1, true};
  Bound whole(make_conv(k, std::size_t(1) << 20), k.batch, Shape{k.c, k.h, k.w}, 3);
  Bound chunked(make_conv(k, 1), k.batch, Shape{k.c, k.h, k.w}, 3);
  EXPECT_EQ(static_cast<Conv2d<double>&>(*chunked.layer).chunk_samples(k.batch), 1u);
  EXPECT_EQ(static_cast<Conv2d<double>&>(*whole.layer).chunk_samples(k.batch), k.batch);
  const Vec x = test::randn<double>(k.batch * k.c * k.h * k.w, 4);
  const Vec dy = test::randn<double>(k.batch * k.out * k.h * k.w, 5);
  expect_near(chunked.forward(x), whole.forward(x), 1e-13, "chunked forward");
  expect_near(chunked.backward(x, dy), whole.backward(x, dy), 1e-13, "chunked dx");
  expect_near(test::to_host(chunked.grads), test::to_host(whole.grads), 1e-13, "chunked dW");
}

// The host's two algorithms (per-thread samples with sequential GEMMs, and
// chunks with threaded GEMMs) against each other, and the samples algorithm
// on the calling thread alone (a 1-thread rank) against all threads: the same
// bits, since its blocks depend on the batch alone. Sizes with enough work
// per block that the kernels run on all threads, not inline.
TEST(Conv2d, SamplesAlgorithmMatchesChunksAndAnyThreadCount) {
  if (!Blas::vendor_sequential_in_kernels())
    GTEST_SKIP() << "this build's BLAS (" << Blas::vendor_name()
                 << ") is not known to run sequentially inside kernels: no samples algorithm";
  Window2d strided = window(3, 3, 2, 1);
  for (const ConvCase& k : {ConvCase{9, 4, 12, 11, 6, window(3, 3, 1, 1), 1, true},
                            ConvCase{7, 4, 13, 12, 6, strided, 2, false}}) {
    auto algo = [&](ConvAlgorithm a) {
      auto conv = std::make_unique<Conv2d<double>>(k.c, k.out, k.win, k.groups, k.bias);
      conv->set_algorithm(a);
      return conv;
    };
    Bound samples(algo(ConvAlgorithm::samples), k.batch, Shape{k.c, k.h, k.w}, 21);
    Bound chunks(algo(ConvAlgorithm::chunks), k.batch, Shape{k.c, k.h, k.w}, 21);
    const auto& conv = static_cast<Conv2d<double>&>(*samples.layer);
    ASSERT_TRUE(conv.runs_samples(samples.ctx, k.batch)) << conv.name();
    ASSERT_FALSE(static_cast<Conv2d<double>&>(*chunks.layer).runs_samples(chunks.ctx, k.batch));
    const Vec x = test::randn<double>(k.batch * k.c * k.h * k.w, 22);
    const Vec dy = test::randn<double>(k.batch * samples.out, 23);
    // Sums of at most 36 products of N(0, 1) values (forward, dx) and of
    // batch x positions such products (dW) in another order: double
    // rounding, far below 1e-12.
    const Vec y = samples.forward(x), dx = samples.backward(x, dy);
    const Vec dw = test::to_host(samples.grads);
    expect_near(y, chunks.forward(x), 1e-12, conv.name() + " forward");
    expect_near(dx, chunks.backward(x, dy), 1e-12, conv.name() + " dx");
    expect_near(dw, test::to_host(chunks.grads), 1e-12, conv.name() + " dW");
    samples.ctx.threads = 1;  // every kernel inline, on the calling thread
    EXPECT_EQ(samples.forward(x), y) << conv.name();
    EXPECT_EQ(samples.backward(x, dy), dx) << conv.name();
    EXPECT_EQ(test::to_host(samples.grads), dw) << conv.name();
    // An empty shard (data parallelism's last global batch may leave a rank
    // none) adds nothing to the weight gradients of the step before it.
    MatrixBuffer<double> none_x("x", 0, samples.in), none_y("y", 0, samples.out);
    Saved<double> saved;
    saved.x = none_x;
    samples.layer->forward(samples.ctx, none_x, none_y, saved);
    samples.layer->backward(samples.ctx, none_y, none_x, saved);
    Kokkos::fence();
    EXPECT_EQ(test::to_host(samples.grads), dw) << conv.name() << ": a batch of 0 changed dW";
  }
}

TEST(Conv2d, GradientsMatchFiniteDifferences) {
  std::size_t seed = 10;
  for (ConvCase k : conv_cases()) {
    k.batch = std::min<std::size_t>(k.batch, 2);
    // Chunks of one sample, and the default (per-thread samples where the
    // BLAS allows it).
    for (std::size_t limit : {std::size_t(1), std::size_t(0)}) {
      Bound b(make_conv(k, limit), k.batch, Shape{k.c, k.h, k.w}, ++seed);
      check_gradients(b, test::randn<double>(k.batch * k.c * k.h * k.w, seed + 7), seed);
    }
  }
}

TEST(Conv2d, ParameterTableIsPyTorchsLayout) {
  Conv2d<float> conv(4, 6, window(3, 5), 2, true);
  conv.set_input_shape(Shape{4, 8, 8});
  const auto t = conv.param_table();
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].name, "weight");
  EXPECT_EQ(t[0].shape, (Shape{6, 2, 3, 5}));
  EXPECT_EQ(t[1].name, "bias");
  EXPECT_EQ(t[1].offset, 6u * 2 * 3 * 5);
  EXPECT_EQ(conv.num_params(), 6u * 2 * 3 * 5 + 6);
  EXPECT_EQ(conv.output_shape(Shape{4, 8, 8}), (Shape{6, 6, 4}));
  EXPECT_DOUBLE_EQ(conv.flops(), 2.0 * 6 * 6 * 4 * (2 * 3 * 5));
}

// -------------------------------------------------------------- Pooling
struct PoolCase {
  PoolKind kind;
  std::size_t batch, c, h, w;
  Window2d win;
  bool include_pad;
};

Vec pool_reference(const PoolCase& k, const Vec& x) {
  Window2d w = k.win;
  if (k.kind == PoolKind::global_avg) w = window(k.h, k.w, 1, 0), w.sh = k.h, w.sw = k.w;
  const std::size_t oh = (k.h + 2 * w.ph - w.dh * (w.kh - 1) - 1) / w.sh + 1;
  const std::size_t ow = (k.w + 2 * w.pw - w.dw * (w.kw - 1) - 1) / w.sw + 1;
  Vec y;
  for (std::size_t b = 0; b < k.batch; ++b)
    for (std::size_t c = 0; c < k.c; ++c)
      for (std::size_t i = 0; i < oh; ++i)
        for (std::size_t j = 0; j < ow; ++j) {
          double best = -std::numeric_limits<double>::infinity(), sum = 0;
          std::size_t inside = 0;
          for (std::size_t a = 0; a < w.kh; ++a)
            for (std::size_t e = 0; e < w.kw; ++e) {
              const long ih = long(i * w.sh + a * w.dh) - long(w.ph);
              const long iw = long(j * w.sw + e * w.dw) - long(w.pw);
              if (ih < 0 || iw < 0 || ih >= long(k.h) || iw >= long(k.w)) continue;
              const double v = x[((b * k.c + c) * k.h + ih) * k.w + iw];
              best = std::max(best, v);
              sum += v;
              ++inside;
            }
          const double divisor = k.include_pad ? double(w.kh * w.kw) : double(inside);
          y.push_back(k.kind == PoolKind::max ? best : sum / divisor);
        }
  return y;
}

std::vector<PoolCase> pool_cases() {
  Window2d asym = window(3, 2, 2, 1);
  asym.pw = 0, asym.sw = 1;
  Window2d dil = window(2, 2, 1, 0, 2);
  return {
      {PoolKind::max, 2, 3, 6, 6, window(2, 2, 2), true},     // the usual 2x2
      {PoolKind::max, 2, 2, 7, 5, window(2, 2, 2), true},     // 2x2, odd sizes (last row and column unread)
      {PoolKind::max, 2, 2, 7, 5, window(3, 3, 2, 1), true},  // padding, odd sizes
      {PoolKind::max, 2, 2, 6, 5, asym, true},                // per-axis window
      {PoolKind::max, 1, 2, 6, 6, dil, true},                 // dilation 2
      {PoolKind::avg, 2, 3, 6, 6, window(2, 2, 2), true},
      {PoolKind::avg, 2, 2, 7, 5, window(3, 3, 2, 1), true},  // padding counted
      {PoolKind::avg, 2, 2, 7, 5, window(3, 3, 2, 1), false}, // padding not counted
      {PoolKind::avg, 2, 2, 5, 6, window(3, 2, 1), true},     // overlapping windows
      {PoolKind::global_avg, 3, 4, 5, 3, Window2d{}, true},
  };
}

TEST(Pool2d, ForwardMatchesReference) {
  std::size_t seed = 30;
  for (const PoolCase& k : pool_cases()) {
    Bound b(std::make_unique<Pool2d<double>>(k.kind, k.win, k.include_pad), k.batch,
            Shape{k.c, k.h, k.w}, ++seed);
    const Vec x = test::randn<double>(k.batch * k.c * k.h * k.w, seed);
    expect_near(b.forward(x), pool_reference(k, x), 1e-14, b.layer->name());
  }
}

TEST(Pool2d, GradientsMatchFiniteDifferences) {
  std::size_t seed = 40;
  for (const PoolCase& k : pool_cases()) {
    Bound b(std::make_unique<Pool2d<double>>(k.kind, k.win, k.include_pad), k.batch,
            Shape{k.c, k.h, k.w}, ++seed);
    // Random N(0, 1) inputs: no two values in a window within 1e-6 of each
    // other (a maximum's kink inside the difference step of 1e-6),
    // checked here rather than assumed.
    const Vec x = test::randn<double>(k.batch * k.c * k.h * k.w, seed);
    for (std::size_t i = 0; i < x.size(); ++i)
      for (std::size_t j = i + 1; j < x.size(); ++j) ASSERT_GT(std::fabs(x[i] - x[j]), 2e-6);
    check_gradients(b, x, seed);
  }
}

TEST(Pool2d, MaxPoolTiesAndNaNsFollowPyTorch) {
  // One 2x2 window: ties pick the first in row-major order; a NaN wins.
  Bound b(std::make_unique<Pool2d<double>>(PoolKind::max, window(2, 2, 2)), 1, Shape{1, 2, 2}, 1);
  const Vec dy{1.0};
  EXPECT_EQ(b.backward({1.0, 3.0, 3.0, 2.0}, dy), (Vec{0, 1, 0, 0}));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(std::isnan(b.forward({1.0, nan, 5.0, 2.0})[0]));
  EXPECT_EQ(b.backward({1.0, nan, 5.0, 2.0}, dy), (Vec{0, 1, 0, 0}));
  // PyTorch's test, v > max || isnan(v): the first of equal maxima, the last
  // of several NaNs, and a NaN first stays (no number exceeds it).
  const std::vector<std::pair<Vec, Vec>> picks{
      {{2.0, 2.0, 2.0, 2.0}, {1, 0, 0, 0}}, {{0.0, 0.0, 4.0, 4.0}, {0, 0, 1, 0}},
      {{1.0, 2.0, 3.0, 4.0}, {0, 0, 0, 1}}, {{nan, 1.0, nan, 0.0}, {0, 0, 1, 0}},
      {{nan, 7.0, 8.0, 9.0}, {1, 0, 0, 0}}, {{4.0, 3.0, 2.0, nan}, {0, 0, 0, 1}}};
  for (const auto& [x, grad] : picks) EXPECT_EQ(b.backward(x, dy), grad) << x[0] << " " << x[3];
}

TEST(Pool2d, OutputShapes) {
  Pool2d<float> max(PoolKind::max, window(2, 2, 2));
  EXPECT_EQ(max.output_shape(Shape{8, 28, 28}), (Shape{8, 14, 14}));
  EXPECT_EQ(max.output_shape(Shape{8, 7, 7}), (Shape{8, 3, 3}));  // floor, as PyTorch
  Pool2d<float> global(PoolKind::global_avg, Window2d{});
  EXPECT_EQ(global.output_shape(Shape{8, 7, 5}), (Shape{8}));
}

// ------------------------------------------------------------ BatchNorm
// Training-mode batch normalisation of (batch, C, S) with the parameters
// p = [gamma, beta]; also the running statistics after one update.
Vec batchnorm_reference(const Vec& x, const Vec& p, std::size_t batch, std::size_t C,
                        std::size_t S, double eps, Vec* mean_out, Vec* var_out) {
  Vec y(x.size());
  for (std::size_t c = 0; c < C; ++c) {
    double mean = 0, var = 0;
    for (std::size_t b = 0; b < batch; ++b)
      for (std::size_t s = 0; s < S; ++s) mean += x[(b * C + c) * S + s];
    mean /= double(batch * S);
    for (std::size_t b = 0; b < batch; ++b)
      for (std::size_t s = 0; s < S; ++s) {
        const double d = x[(b * C + c) * S + s] - mean;
        var += d * d;
      }
    var /= double(batch * S);
    for (std::size_t b = 0; b < batch; ++b)
      for (std::size_t s = 0; s < S; ++s) {
        const std::size_t i = (b * C + c) * S + s;
        y[i] = (x[i] - mean) / std::sqrt(var + eps) * p[c] + p[C + c];
      }
    if (mean_out) (*mean_out)[c] = mean;
    if (var_out) (*var_out)[c] = var;
  }
  return y;
}

TEST(BatchNorm, TrainingForwardAndRunningStatisticsMatchReference) {
  const std::size_t batch = 5, C = 3, H = 4, W = 3, S = H * W, n = batch * S;
  Bound b(std::make_unique<BatchNorm<double>>(C, 1e-5, 0.1), batch, Shape{C, H, W}, 2);
  Vec x = test::randn<double>(batch * C * S, 3);
  for (double& v : x) v = 3.0 + 2.0 * v;  // a mean and a scale to remove
  Vec mean(C), var(C);
  const Vec want = batchnorm_reference(x, b.param_values(), batch, C, S, 1e-5, &mean, &var);
  expect_near(b.forward(x), want, 1e-12, "BatchNorm2d forward");
  auto& bn = static_cast<BatchNorm<double>&>(*b.layer);
  const Vec rm = bn.read_buffer(0), rv = bn.read_buffer(1);
  for (std::size_t c = 0; c < C; ++c) {
    EXPECT_NEAR(rm[c], 0.1 * mean[c], 1e-14) << "running_mean";
    // The unbiased variance n / (n - 1) var, as PyTorch.
    EXPECT_NEAR(rv[c], 0.9 + 0.1 * var[c] * double(n) / double(n - 1), 1e-14) << "running_var";
  }
  EXPECT_EQ(bn.read_buffer(2), Vec{1.0});  // num_batches_tracked
  EXPECT_EQ(bn.name(), "BatchNorm2d(3)");
}

TEST(BatchNorm, EvaluationUsesTheRunningStatistics) {
  const std::size_t batch = 4, C = 2, S = 3;
  Bound b(std::make_unique<BatchNorm<double>>(C), batch, Shape{C, S}, 5);
  auto& bn = static_cast<BatchNorm<double>&>(*b.layer);
  bn.write_buffer(0, {0.5, -1.0});
  bn.write_buffer(1, {4.0, 0.25});
  bn.set_training(false);
  const Vec x = test::randn<double>(batch * C * S, 6);
  const Vec p = b.param_values();
  Vec want(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::size_t c = (i / S) % C;
    const double m = c == 0 ? 0.5 : -1.0, v = c == 0 ? 4.0 : 0.25;
    want[i] = (x[i] - m) / std::sqrt(v + 1e-5) * p[c] + p[C + c];
  }
  expect_near(b.forward(x), want, 1e-13, "BatchNorm1d evaluation");
  EXPECT_EQ(bn.read_buffer(0), (Vec{0.5, -1.0}));  // not updated
  EXPECT_EQ(bn.read_buffer(2), Vec{0.0});
}

TEST(BatchNorm, GradientsMatchFiniteDifferences) {
  // Training mode: the statistics depend on the whole batch, so the finite
  // differences of each input see them move (the full Jacobian).
  for (bool training : {true, false}) {
    Bound b(std::make_unique<BatchNorm<double>>(3), 4, Shape{3, 2, 3}, 7);
    b.layer->set_training(training);
    check_gradients(b, test::randn<double>(4 * 3 * 6, 8), 9);
  }
  Bound flat(std::make_unique<BatchNorm<double>>(5), 6, Shape{5}, 10);  // BatchNorm1d on features
  check_gradients(flat, test::randn<double>(6 * 5, 11), 12);
}

// A BatchNorm of C channels over inputs of shape `in` bound to its own
// parameters and gradients, with a step's saved state for `batch` samples
// (x and y set by the test).
template <class T>
struct BoundBatchNorm {
  BatchNorm<T> bn;
  VectorBuffer<T> params, grads, scratch;
  Saved<T> saved;
  BoundBatchNorm(std::size_t C, const Shape& in, std::size_t batch)
      : bn(C), params("p", 2 * C), grads("g", 2 * C) {
    bn.set_input_shape(in);
    bn.reserve(batch, in.numel());
    scratch = VectorBuffer<T>("s", bn.saved_size(batch));
    bn.bind(params, grads);
    saved.scratch = scratch;
  }
};

TEST(BatchNorm, RecomputationDoesNotUpdateTheRunningStatistics) {
  BoundBatchNorm<double> b(2, Shape{2, 2}, 3);
  Kokkos::deep_copy(b.params, 1.0);
  auto x = test::to_device(test::randn<double>(3 * 4, 13), 3, 4);
  MatrixBuffer<double> y("y", 3, 4);
  b.saved.x = x;
  b.saved.y = y;
  Context ctx;
  b.bn.forward(ctx, x, y, b.saved);
  const Vec after_one = b.bn.read_buffer(0);
  b.saved.recomputing = true;
  b.bn.forward(ctx, x, y, b.saved);
  EXPECT_EQ(b.bn.read_buffer(0), after_one);
  EXPECT_EQ(b.bn.batches_tracked(), 1u);
}

// Training forward on host threads runs one item per channel where rows are
// long (forward_by_channel); a device, SyncBatchNorm over ranks and short
// rows run the all-channel kernels (batch_statistics). The saved statistics and the
// running statistics must be the same bits either way (float, shapes whose
// partial sums end mid-row and span rows).
TEST(BatchNorm, HostChannelItemsGiveTheBitsOfTheAllChannelKernels) {
  if (!host_kernels) GTEST_SKIP() << "kernels run on a device: no channel items";
  for (const Shape in : {Shape{5, 7, 9}, Shape{3, 28, 28}, Shape{2, 23, 29}, Shape{6}}) {
    const std::size_t batch = 37, C = in[0], n = in.numel();
    auto x = test::to_device(test::randn<float>(batch * n, 41), batch, n);
    auto run = [&](bool by_channel) {
      BoundBatchNorm<float> b(C, in, batch);
      Kokkos::deep_copy(b.params, test::to_device(test::randn<float>(2 * C, 42)));
      MatrixBuffer<float> y("y", batch, n);
      b.saved.x = x;
      b.saved.y = y;
      Context ctx;
      if (by_channel)
        b.bn.forward_by_channel(ctx, x, y, b.saved);
      else
        b.bn.batch_statistics(ctx, x, b.saved);
      Kokkos::fence();
      std::vector<float> out = test::to_host(b.scratch);
      for (std::size_t k : {0, 1})
        for (double v : b.bn.read_buffer(k)) out.push_back(static_cast<float>(v));
      return out;
    };
    EXPECT_EQ(run(true), run(false)) << in.str();
  }
}

// BatchNorm with the ReLU after it fused (FusedActivation; Sequential's
// default) against the two layers apart (BuildOptions::fuse_activations =
// false) as oracle: the same bits for the model output, the model input's
// gradient, every parameter gradient and the running statistics, on each
// kernel path: channel items (28 x 28 rows: forward and backward; 7 x 9:
// backward only), the all-channel kernels (BatchNorm1d's single values),
// evaluation (running statistics) and --reproducible's exact sums; with
// and without the model input's gradient (the first BatchNorm's backward
// then sums through the ReLU itself). Two pairs in a row: two skipped
// layers in one model.
TEST(BatchNorm, FusedReluGivesTheBitsOfTheTwoLayersApart) {
  enum Mode { training, evaluation, exact };
  for (const Shape in : {Shape{3, 28, 28}, Shape{5, 7, 9}, Shape{6}})
    for (const Mode mode : {training, evaluation, exact})
    for (const bool want_dx : {true, false}) {
      const std::size_t batch = 8, n = in.numel(), C = in[0];  // whole chunks of 4 (exact)
      const std::string what = in.str() + " mode " + std::to_string(mode) + (want_dx ? " with dx" : "");
      auto run = [&](bool fuse) {
        Sequential<float> m(in);
        for (int k = 0; k < 2; ++k) {
          m.add(std::make_unique<BatchNorm<float>>(C, 1e-5, 0.1, /*sync=*/mode == exact));
          m.add(make_activation<float>(ActivationKind::relu));
        }
        m.add(std::make_unique<Flatten<float>>());
        m.add(std::make_unique<Linear<float>>(n, 4));
        m.add(make_activation<float>(ActivationKind::relu));  // after a Linear: apart
        BuildOptions o;
        o.max_batch = batch;
        o.fuse_activations = fuse;
        if (mode == exact) o.numerics.exact_chunk = 4;
        m.build(o);
        EXPECT_EQ(m.fused(1), fuse) << what;
        EXPECT_EQ(m.fused(3), fuse) << what;
        EXPECT_FALSE(m.fused(6)) << what;
        // gamma and beta of either sign: the ReLU cuts each channel elsewhere.
        Kokkos::deep_copy(m.params(), test::to_device(test::randn<float>(m.num_params(), 51)));
        Context ctx;
        ctx.reproducible = mode == exact;
        auto x = test::to_device(test::randn<float>(batch * n, 52), batch, n);
        if (mode == evaluation) {  // running statistics away from 0 and 1 first
          m.forward(ctx, x);
          m.set_training(false);
        }
        std::vector<float> out = test::to_host(m.forward(ctx, x));
        Kokkos::deep_copy(m.output_grad(), test::to_device(test::randn<float>(batch * 4, 53), batch, 4));
        if (want_dx) {
          MatrixBuffer<float> dx("dx", batch, n);
          m.round_output_grad(ctx);
          m.backward(ctx, m.output_grad(), dx, 0);
          Kokkos::fence();
          for (float v : test::to_host(dx)) out.push_back(v);
        } else {
          m.backward(ctx);
          Kokkos::fence();
        }
        for (float v : test::to_host(m.grads())) out.push_back(v);
        for (const auto& [name, values] : m.read_buffers())
          for (double v : values) out.push_back(static_cast<float>(v));
        return out;
      };
      const std::vector<float> apart = run(false), fused = run(true);
      ASSERT_EQ(fused.size(), apart.size()) << what;
      std::size_t differ = 0;
      for (std::size_t i = 0; i < fused.size(); ++i)
        if (std::memcmp(&fused[i], &apart[i], sizeof(float)) != 0 && differ++ < 5)
          ADD_FAILURE() << what << ": value " << i << " fused " << fused[i] << ", apart " << apart[i];
      EXPECT_EQ(differ, 0u) << what << ": of " << fused.size() << " values";
    }
  // --describe before the build says what the run's build fuses: fp32 runs
  // the ReLU in the BatchNorm, 16-bit storage keeps them apart.
  Sequential<float> m(Shape{3, 4, 4});
  m.add(std::make_unique<BatchNorm<float>>(3));
  m.add(make_activation<float>(ActivationKind::relu));
  BuildOptions bf16;
  bf16.numerics.storage = Precision::bf16;
  EXPECT_NE(m.describe().find("ReLU (fused)"), std::string::npos) << m.describe();
  EXPECT_EQ(m.describe(bf16).find("(fused)"), std::string::npos) << m.describe(bf16);
}

// A float layer on the first BatchNorm of the CNN at batch 128 (32 channels
// of 28 x 28: 100,352 values per channel), against a float64 oracle. The
// values sit around 4 (as activations after a ReLU sit above 0): a float
// running sum reaches 400,000, where one addition rounds by up to 1/64, and
// a sum of 100,352 of them in float is off by about 1e-5 of the mean (the
// layer did that until its sums went to double: y was off by ~1e-5).
TEST(BatchNorm, FloatStatisticsOfALargeBatchMatchAFloat64Oracle) {
  const std::size_t batch = 128, C = 32, H = 28, W = 28, S = H * W, in = C * S, n = batch * S;
  BoundBatchNorm<float> b(C, Shape{C, H, W}, batch);
  std::vector<float> p(2 * C);
  for (std::size_t c = 0; c < C; ++c) p[c] = 1.0f + 0.01f * static_cast<float>(c), p[C + c] = 0.1f;
  Kokkos::deep_copy(b.params, test::to_device(p));
  std::vector<float> x = test::randn<float>(batch * in, 21), dy = test::randn<float>(batch * in, 22);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] += 4.0f + 0.05f * static_cast<float>(i / S % C);
  auto dx_in = test::to_device(x, batch, in);
  MatrixBuffer<float> y("y", batch, in), dx("dx", batch, in);
  b.saved.x = dx_in;
  b.saved.y = y;
  Context ctx;
  b.bn.forward(ctx, dx_in, y, b.saved);
  b.bn.backward(ctx, test::to_device(dy, batch, in), dx, b.saved);
  Kokkos::fence();
  const std::vector<float> got_y = test::to_host(y), got_g = test::to_host(b.grads);

  const Vec xd(x.begin(), x.end()), pd(p.begin(), p.end());
  Vec mean(C), var(C);
  const Vec want_y = batchnorm_reference(xd, pd, batch, C, S, 1e-5, &mean, &var);
  // y = x scale + shift in float (|x scale| < 10): two roundings of up to
  // 2^-24 * 10, and the float mean and 1/sqrt(var + eps) (2^-24 relative
  // each) move y by about as much: 4e-6 is twice that bound.
  std::size_t bad = 0;
  for (std::size_t i = 0; i < x.size(); ++i)
    if (std::abs(got_y[i] - want_y[i]) > 4e-6 && bad++ < 5)
      ADD_FAILURE() << "y[" << i << "] = " << got_y[i] << ", float64 oracle " << want_y[i];
  EXPECT_EQ(bad, 0u) << "of " << x.size() << " outputs";
  // The parameter gradients: dbeta = sum dy, dgamma = sum dy xhat per channel.
  // dbeta: a sum in double rounded once to float: 2^-23 |want| (twice the
  // rounding) plus double's n 2^-53 sum |dy|. dgamma's xhat uses the float
  // mean and rstd (2^-24 relative each): 2^-23 (|mean| rstd + |xhat|) |dy|
  // per term on top.
  for (std::size_t c = 0; c < C; ++c) {
    double db = 0, dg = 0, abs_dy = 0, abs_dg = 0;
    const double rstd = 1 / std::sqrt(var[c] + 1e-5);
    for (std::size_t b = 0; b < batch; ++b)
      for (std::size_t s = 0; s < S; ++s) {
        const std::size_t i = b * in + c * S + s;
        const double xhat = (xd[i] - mean[c]) * rstd;
        db += dy[i];
        dg += dy[i] * xhat;
        abs_dy += std::abs(dy[i]);
        abs_dg += std::abs(dy[i]) * (std::abs(mean[c]) * rstd + std::abs(xhat));
      }
    const double u = std::ldexp(1.0, -23), dbl = static_cast<double>(n) * std::ldexp(1.0, -53);
    EXPECT_LE(std::abs(got_g[C + c] - db), u * std::abs(db) + dbl * abs_dy) << "dbeta[" << c << "]";
    EXPECT_LE(std::abs(got_g[c] - dg), u * std::abs(dg) + u * abs_dg + dbl * abs_dg) << "dgamma[" << c << "]";
  }
}

TEST(BatchNorm, OneValuePerChannelInTrainingIsAnError) {
  Bound b(std::make_unique<BatchNorm<double>>(3), 1, Shape{3}, 1);
  try {
    b.forward({1.0, 2.0, 3.0});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more than one value per channel"), std::string::npos)
        << e.what();
  }
}

// --------------------------------------------------------------- Flatten
TEST(Flatten, CopiesRowsAndFlattensTheShape) {
  Bound b(std::make_unique<Flatten<double>>(), 2, Shape{2, 3, 2}, 1);
  EXPECT_EQ(b.layer->output_shape(Shape{2, 3, 2}), Shape{12});
  const Vec x = test::randn<double>(24, 2), dy = test::randn<double>(24, 3);
  EXPECT_EQ(b.forward(x), x);
  EXPECT_EQ(b.backward(x, dy), dy);
}

// ----------------------------------------------------------- bad input
// The error a model description gives, or "" when it builds.
std::string model_error(const std::string& text) {
  try {
    build_layers<float>(parse_model(text, "cnn.toml"), 1);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_error(const std::string& text, const std::vector<std::string>& parts) {
  const std::string e = model_error(text);
  ASSERT_FALSE(e.empty()) << "no error for\n" << text;
  for (const auto& p : parts) EXPECT_NE(e.find(p), std::string::npos) << "'" << p << "' not in: " << e;
}

TEST(CnnModels, BadShapesAndOptionsAreClearErrors) {
  const std::string head = "input = [3, 8, 8]\n[[layers]]\n";
  // An output that would be empty names the layer, the input shape and the window.
  expect_error(head + "type = \"conv2d\"\nout = 4\nkernel = 9\n",
               {"cnn.toml:2", "Conv2d(3, 4, kernel 9x9)", "{3, 8, 8}", "would be empty"});
  // Channels that do not divide by groups.
  expect_error(head + "type = \"conv2d\"\nout = 4\nkernel = 3\ngroups = 2\n",
               {"cnn.toml:2", "input channels (3) do not divide by groups (2)"});
  // A convolution on a flat input names the shape it got.
  expect_error("input = [784]\n[[layers]]\ntype = \"conv2d\"\nout = 4\nkernel = 3\n",
               {"cnn.toml:2", "{channels, height, width}", "{784}"});
  // Bad option values name the key.
  expect_error(head + "type = \"conv2d\"\nout = 4\nkernel = [3, 3, 3]\n",
               {"cnn.toml:5", "key 'kernel'", "[height, width]"});
  expect_error(head + "type = \"maxpool2d\"\nkernel = 2\npadding = 2\n",
               {"cnn.toml:2", "padding must be at most half the kernel"});
  expect_error(head + "type = \"conv2d\"\nout = 4\n", {"cnn.toml:2", "needs the key 'kernel'"});
  expect_error(head + "type = \"batchnorm\"\n[[layers]]\ntype = \"maxpool2d\"\nkernel = 16\n",
               {"cnn.toml:4", "MaxPool2d(kernel 16x16, stride 16)", "would be empty"});
  EXPECT_EQ(model_error(head + "type = \"conv2d\"\nout = 4\nkernel = [3, 1]\npadding = [1, 0]\n"),
            "");
}

}  // namespace
}  // namespace strata
