// Optimizers against hand-computed steps and against a naive host
// implementation of PyTorch's update rules over several steps.
#include "backends/error.hpp"
#include "layers/loss_scaler.hpp"
#include "layers/lr_schedule.hpp"
#include "layers/optimizer.hpp"
#include "test_utils.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace strata {
namespace {

using Vec = std::vector<double>;

// Runs `steps` optimizer steps with gradient g_t = grads[t] on device.
Vec run(const OptimizerConfig& c, Vec p, const std::vector<Vec>& grads) {
  Context ctx;
  Optimizer<double> opt(c, p.size());
  auto dp = test::to_device(p);
  for (const Vec& g : grads) opt.step(ctx, dp, test::to_device(g));
  return test::to_host(dp);
}

// Naive reference of torch.optim's SGD / Adam / AdamW.
Vec reference(const OptimizerConfig& c, Vec p, const std::vector<Vec>& grads) {
  Vec buf(p.size()), m(p.size()), v(p.size());
  for (std::size_t t = 1; t <= grads.size(); ++t) {
    for (std::size_t i = 0; i < p.size(); ++i) {
      double g = grads[t - 1][i];
      if (c.kind == OptimizerKind::sgd) {
        g += c.weight_decay * p[i];
        if (c.momentum > 0) {
          buf[i] = t == 1 ? g : c.momentum * buf[i] + g;
          g = c.nesterov ? g + c.momentum * buf[i] : buf[i];
        }
        p[i] -= c.lr * g;
      } else {
        if (c.kind == OptimizerKind::adamw) p[i] *= 1 - c.lr * c.weight_decay;
        else g += c.weight_decay * p[i];
        m[i] = c.beta1 * m[i] + (1 - c.beta1) * g;
        v[i] = c.beta2 * v[i] + (1 - c.beta2) * g * g;
        const double mh = m[i] / (1 - std::pow(c.beta1, t)), vh = v[i] / (1 - std::pow(c.beta2, t));
        p[i] -= c.lr * mh / (std::sqrt(vh) + c.eps);
      }
    }
  }
  return p;
}

TEST(Optimizer, SgdHandComputed) {
  OptimizerConfig c;
  c.lr = 0.1;
  EXPECT_NEAR(run(c, {1.0}, {{0.5}})[0], 0.95, 1e-15);
  c.momentum = 0.9;  // buf 0.5 then 0.95: p = 1 - 0.05 - 0.095
  EXPECT_NEAR(run(c, {1.0}, {{0.5}, {0.5}})[0], 0.855, 1e-15);
  c.nesterov = true;  // step 1: 0.5 + 0.9*0.5 = 0.95 -> 0.905
  EXPECT_NEAR(run(c, {1.0}, {{0.5}})[0], 0.905, 1e-15);
  c = OptimizerConfig{};
  c.lr = 0.1;
  c.weight_decay = 0.1;  // g = 0.5 + 0.1 -> 1 - 0.06
  EXPECT_NEAR(run(c, {1.0}, {{0.5}})[0], 0.94, 1e-15);
}

TEST(Optimizer, AdamHandComputed) {
  OptimizerConfig c;
  c.kind = OptimizerKind::adam;
  c.lr = 0.1;
  // First step: m_hat = g, v_hat = g^2, so the step is lr * g / (|g| + eps).
  EXPECT_NEAR(run(c, {1.0, 1.0}, {{0.5, -2.0}})[0], 1 - 0.1 * 0.5 / (0.5 + 1e-8), 1e-15);
  EXPECT_NEAR(run(c, {1.0, 1.0}, {{0.5, -2.0}})[1], 1 + 0.1 * 2.0 / (2.0 + 1e-8), 1e-15);
  c.kind = OptimizerKind::adamw;
  c.weight_decay = 0.5;  // p = 1 * (1 - 0.05) then the Adam step
  EXPECT_NEAR(run(c, {1.0}, {{0.5}})[0], 0.95 - 0.1 * 0.5 / (0.5 + 1e-8), 1e-15);
}

// SGD, SGD with momentum and weight decay, Nesterov, Adam, Adam with L2
// weight decay, AdamW.
std::vector<OptimizerConfig> all_configs() {
  std::vector<OptimizerConfig> configs(6);
  configs[1].momentum = 0.9;
  configs[1].weight_decay = 1e-2;
  configs[2].momentum = 0.8;
  configs[2].nesterov = true;
  configs[3].kind = OptimizerKind::adam;
  configs[3].lr = 1e-3;
  configs[4].kind = OptimizerKind::adam;
  configs[4].weight_decay = 0.1;
  configs[5].kind = OptimizerKind::adamw;
  configs[5].weight_decay = 0.1;
  return configs;
}

TEST(Optimizer, MatchesReferenceOverManySteps) {
  const std::size_t n = 1001, steps = 25;
  const Vec p0 = test::randn<double>(n, 1);
  std::vector<Vec> grads;
  for (std::size_t t = 0; t < steps; ++t) grads.push_back(test::randn<double>(n, 10 + t));
  for (const auto& c : all_configs()) {
    const Vec got = run(c, p0, grads), want = reference(c, p0, grads);
    for (std::size_t i = 0; i < n; ++i)
      ASSERT_NEAR(got[i], want[i], 1e-13) << to_string(c.kind) << " momentum " << c.momentum;
  }
}

// Parameter groups: the ranges set_no_decay names are updated as with no
// weight decay, the others as with it (every optimizer, both fused and not).
TEST(Optimizer, NoDecayRangesAreUpdatedWithoutWeightDecay) {
  const std::size_t n = 50, steps = 6;
  const Vec p0 = test::randn<double>(n, 2);
  std::vector<Vec> grads;
  for (std::size_t t = 0; t < steps; ++t) grads.push_back(test::randn<double>(n, 30 + t));
  const std::vector<std::pair<std::size_t, std::size_t>> ranges{{3, 9}, {20, 21}, {40, 50}};
  auto spared = [&](std::size_t i) {
    for (const auto& [a, b] : ranges)
      if (i >= a && i < b) return true;
    return false;
  };
  for (auto c : all_configs()) {
    if (c.weight_decay == 0) continue;
    Context ctx;
    Optimizer<double> opt(c, n);
    opt.set_no_decay(ranges);
    auto p = test::to_device(p0);
    for (const Vec& g : grads) opt.step(ctx, p, test::to_device(g));
    OptimizerConfig without = c;
    without.weight_decay = 0;
    const Vec got = test::to_host(p), with_wd = reference(c, p0, grads),
              no_wd = reference(without, p0, grads);
    for (std::size_t i = 0; i < n; ++i)
      ASSERT_NEAR(got[i], spared(i) ? no_wd[i] : with_wd[i], 1e-13) << to_string(c.kind) << " " << i;
  }
  // The ranges of a model's no_decay tensors within a slice of its buffer.
  const std::vector<ParamInfo> t{{"w", Shape{2, 3}, 0, ParamGroup::decay},
                                 {"b", Shape{2}, 6, ParamGroup::no_decay},
                                 {"n", Shape{4}, 8, ParamGroup::no_decay}};
  EXPECT_EQ(no_decay_ranges(t, 0, 12), (std::vector<std::pair<std::size_t, std::size_t>>{{6, 8}, {8, 12}}));
  EXPECT_EQ(no_decay_ranges(t, 7, 3), (std::vector<std::pair<std::size_t, std::size_t>>{{0, 1}, {1, 3}}));
}

TEST(Optimizer, FloatMatchesDoubleClosely) {
  OptimizerConfig c;
  c.kind = OptimizerKind::adamw;
  c.weight_decay = 0.01;
  const std::size_t n = 100;
  const Vec p0 = test::randn<double>(n, 1), g = test::randn<double>(n, 2);
  Context ctx;
  Optimizer<float> opt(c, n);
  std::vector<float> pf(p0.begin(), p0.end()), gf(g.begin(), g.end());
  auto dp = test::to_device(pf);
  for (int t = 0; t < 5; ++t) opt.step(ctx, dp, test::to_device(gf));
  const auto got = test::to_host(dp);
  const Vec want = reference(c, p0, std::vector<Vec>(5, g));
  for (std::size_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], want[i], 1e-5);
}

TEST(Optimizer, BadSettingsAreConfigErrors) {
  OptimizerConfig c;
  c.lr = -1;
  EXPECT_THROW(Optimizer<float>(c, 1), Error);
  c = OptimizerConfig{};
  c.nesterov = true;  // without momentum
  EXPECT_THROW(Optimizer<float>(c, 1), Error);
  c = OptimizerConfig{};
  c.kind = OptimizerKind::adam;
  c.beta2 = 1.0;
  EXPECT_THROW(Optimizer<float>(c, 1), Error);
  EXPECT_THROW(parse_optimizer("lbfgs"), Error);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  // memcmp of no bytes still needs valid pointers (UBSan): empty vectors are equal here.
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Fused steps (no scaling, no clipping) equal step() bitwise in float, for
// every optimizer; gradients scaled by a power of two and unscaled by the
// fused step too (the scaling is exact). The 16-bit copies equal the updated
// parameters converted.
TEST(FusedOptimizer, EqualsUnfusedBitwiseInFloat) {
  const std::size_t n = 1001, steps = 8;
  const auto p0 = test::randn<float>(n, 1);
  std::vector<std::vector<float>> grads, scaled;
  for (std::size_t t = 0; t < steps; ++t) {
    grads.push_back(test::randn<float>(n, 10 + t));
    scaled.push_back(grads.back());
    for (float& g : scaled.back()) g *= 1024.0f;
  }
  Context ctx;
  for (const auto& c : all_configs()) {
    Optimizer<float> ref(c, n), fused(c, n), unscaled(c, n);
    auto pr = test::to_device(p0), pf = test::to_device(p0), pu = test::to_device(p0);
    VectorBuffer<bf16> cb("cb", n);
    VectorBuffer<fp16> ch("ch", n);
    VectorBuffer<float> cr("cr", n);
    for (std::size_t t = 0; t < steps; ++t) {
      ref.step(ctx, pr, test::to_device(grads[t]));
      FusedStep plain;
      plain.copy_bf16 = cb;
      plain.copy_fp16 = ch;
      plain.copy_rounded = cr;
      plain.copy_precision = Precision::bf16;
      const FusedResult r = fused.step_fused(ctx, pf, test::to_device(grads[t]), plain);
      ASSERT_TRUE(r.finite && r.applied);
      EXPECT_EQ(r.clip_coef, 1.0);
      FusedStep unscale;
      unscale.inv_scale = 1.0 / 1024;
      unscaled.step_fused(ctx, pu, test::to_device(scaled[t]), unscale);
    }
    const auto want = test::to_host(pr);
    ASSERT_TRUE(same_bits(test::to_host(pf), want)) << to_string(c.kind) << " momentum " << c.momentum;
    ASSERT_TRUE(same_bits(test::to_host(pu), want)) << "unscaled " << to_string(c.kind);
    ASSERT_TRUE(same_bits(test::to_host(fused.state0()), test::to_host(ref.state0())));
    const auto hb = test::to_host(cb);
    const auto hh = test::to_host(ch);
    const auto hr = test::to_host(cr);
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(hb[i].bits, bf16(want[i]).bits);
      ASSERT_EQ(hh[i].bits, fp16(want[i]).bits);
      ASSERT_EQ(hr[i], round_to<bf16>(want[i]));
    }
  }
}

// Clipping by the global norm against a naive reference: norm in double,
// coef = min(1, max_norm / (norm + 1e-6)) (torch.nn.utils.clip_grad_norm_),
// then the reference update on the clipped, unscaled gradients.
TEST(FusedOptimizer, ClipByGlobalNormMatchesNaiveReference) {
  const std::size_t n = 257, steps = 6;
  const Vec p0 = test::randn<double>(n, 3);
  std::vector<Vec> grads;
  for (std::size_t t = 0; t < steps; ++t) grads.push_back(test::randn<double>(n, 40 + t));
  const double scale = 256, max_norm = 3.0;  // the norm of each gradient is about 16
  for (const auto& c : all_configs()) {
    std::vector<Vec> clipped;
    Context ctx;
    Optimizer<double> opt(c, n);
    auto dp = test::to_device(p0);
    for (const Vec& g : grads) {
      double sq = 0;
      for (double v : g) sq += v * v;
      const double norm = std::sqrt(sq), coef = std::min(1.0, max_norm / (norm + 1e-6));
      Vec cg = g;
      for (double& v : cg) v *= coef;
      clipped.push_back(cg);
      Vec sg = g;
      for (double& v : sg) v *= scale;
      FusedStep f;
      f.inv_scale = 1 / scale;
      f.max_norm = max_norm;
      const FusedResult r = opt.step_fused(ctx, dp, test::to_device(sg), f);
      ASSERT_NEAR(r.grad_norm, norm, 1e-12 * norm);
      ASSERT_NEAR(r.clip_coef, coef, 1e-15);
      ASSERT_LT(r.clip_coef, 1.0);
    }
    const Vec got = test::to_host(dp), want = reference(c, p0, clipped);
    for (std::size_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], want[i], 1e-13) << to_string(c.kind);
  }
  // A norm below max_norm is left alone.
  Context ctx;
  Optimizer<double> opt(OptimizerConfig{}, 2);
  auto dp = test::to_device(Vec{1.0, 1.0});
  FusedStep f;
  f.max_norm = 10;
  EXPECT_EQ(opt.step_fused(ctx, dp, test::to_device(Vec{3.0, 4.0}), f).clip_coef, 1.0);
  EXPECT_NEAR(test::to_host(dp)[1], 1 - 0.01 * 4, 1e-15);
}

TEST(FusedOptimizer, NonFiniteGradientsSkipTheStep) {
  Context ctx;
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), HUGE_VALF, -HUGE_VALF}) {
    OptimizerConfig c;
    c.kind = OptimizerKind::adam;
    Optimizer<float> opt(c, 3);
    auto p = test::to_device(std::vector<float>{1, 2, 3});
    opt.step_fused(ctx, p, test::to_device(std::vector<float>{0.1f, 0.2f, 0.3f}), {});
    const auto before = test::to_host(p), m_before = test::to_host(opt.state0());
    const FusedResult r = opt.step_fused(ctx, p, test::to_device(std::vector<float>{0.1f, bad, 0.3f}), {});
    EXPECT_FALSE(r.finite);
    EXPECT_FALSE(r.applied);
    EXPECT_EQ(opt.steps(), 1);
    EXPECT_TRUE(same_bits(test::to_host(p), before));
    EXPECT_TRUE(same_bits(test::to_host(opt.state0()), m_before));
  }
  // Huge but finite gradients are finite (the norm is summed in double).
  Optimizer<float> opt(OptimizerConfig{}, 2);
  auto p = test::to_device(std::vector<float>{0, 0});
  const FusedResult r = opt.step_fused(ctx, p, test::to_device(std::vector<float>{3e38f, 3e38f}), {});
  EXPECT_TRUE(r.finite && r.applied);
  EXPECT_NEAR(r.grad_norm, 3e38 * std::sqrt(2.0), 1e32);
}

// The scaler's state machine against a scripted sequence of overflows.
TEST(LossScaler, ScriptedGrowthOverflowSkipAndFloor) {
  LossScalerConfig c;
  c.init_scale = 1024;
  c.growth_interval = 3;
  c.min_scale = 64;
  c.max_scale = 4096;
  DynamicLossScaler s(c);
  struct Expect {
    bool finite, applied;
    double scale;
    std::int64_t good;
  };
  const std::vector<Expect> script = {
      {true, true, 1024, 1},   {true, true, 1024, 2},  {true, true, 2048, 0},   // growth
      {true, true, 2048, 1},   {false, false, 1024, 0},                        // overflow: skip, back off
      {true, true, 1024, 1},   {true, true, 1024, 2},  {true, true, 2048, 0},   // growth again
      {true, true, 2048, 1},   {true, true, 2048, 2},  {true, true, 4096, 0},   // to the cap
      {true, true, 4096, 1},   {true, true, 4096, 2},  {true, true, 4096, 0},   // capped
      {false, false, 2048, 0}, {false, false, 1024, 0}, {false, false, 512, 0},
      {false, false, 256, 0},  {false, false, 128, 0}, {false, false, 64, 0},   // the floor
      {false, false, 64, 0},   {false, false, 64, 0},                           // never below
      {true, true, 64, 1},     {true, true, 64, 2},    {true, true, 128, 0},    // recovers
  };
  std::int64_t skipped = 0;
  for (std::size_t i = 0; i < script.size(); ++i) {
    const auto& e = script[i];
    EXPECT_EQ(s.update(e.finite), e.applied) << "step " << i;
    EXPECT_EQ(s.scale(), e.scale) << "step " << i;
    EXPECT_EQ(s.state().good_steps, e.good) << "step " << i;
    skipped += e.applied ? 0 : 1;
  }
  EXPECT_EQ(s.state().skipped, skipped);
  // State round trip (checkpoints).
  DynamicLossScaler t(c);
  t.set_state(s.state());
  EXPECT_EQ(t.scale(), 128);
  EXPECT_EQ(t.update(true), true);
  EXPECT_EQ(t.state().good_steps, 1);
  EXPECT_THROW(t.set_state({0.0, 0, 0}), Error);
  // Bad settings name the setting.
  c.backoff_factor = 1.5;
  EXPECT_THROW(DynamicLossScaler{c}, Error);
  c = LossScalerConfig{};
  c.min_scale = 0;
  EXPECT_THROW(DynamicLossScaler{c}, Error);
}

}  // namespace
}  // namespace strata

// ------------------------------------------------------ learning-rate schedules
namespace strata {
namespace {

TEST(LrSchedule, ConstantWithLinearWarmup) {
  LrSchedule s;
  s.lr = 0.1;
  s.warmup = 4;
  // Warm-up: lr (k + 1) / 4 for steps 0..3, then lr.
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 0, 100), 0.025);
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 3, 100), 0.1);
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 50, 100), 0.1);
}

TEST(LrSchedule, CosineFollowsPyTorchsCosineAnnealing) {
  // CosineAnnealingLR(T_max = 8, eta_min = 0.01) from lr 0.09: eta_min +
  // 0.08 (1 + cos(pi e / 8)) / 2 at e = 0, 2, 4, 6, 8 is 0.09,
  // 0.01 + 0.04 (1 + sqrt(2) / 2), 0.05, 0.01 + 0.04 (1 - sqrt(2) / 2), 0.01.
  LrSchedule s;
  s.kind = LrScheduleKind::cosine;
  s.lr = 0.09;
  s.lr_min = 0.01;
  const double r = std::sqrt(2.0) / 2;
  EXPECT_NEAR(scheduled_lr(s, 0, 8), 0.09, 1e-15);
  EXPECT_NEAR(scheduled_lr(s, 2, 8), 0.01 + 0.04 * (1 + r), 1e-15);
  EXPECT_NEAR(scheduled_lr(s, 4, 8), 0.05, 1e-15);
  EXPECT_NEAR(scheduled_lr(s, 6, 8), 0.01 + 0.04 * (1 - r), 1e-15);
  EXPECT_NEAR(scheduled_lr(s, 8, 8), 0.01, 1e-15);
  // With a warm-up of 2 steps the cosine starts after it, over the 8 left.
  s.warmup = 2;
  EXPECT_NEAR(scheduled_lr(s, 0, 10), 0.045, 1e-15);
  EXPECT_NEAR(scheduled_lr(s, 6, 10), 0.05, 1e-15);
}

TEST(LrSchedule, BadSettingsAreConfigErrors) {
  EXPECT_THROW(parse_lr_schedule("linear"), Error);
  LrSchedule s;
  s.lr = 0.1;
  s.lr_min = 0.2;
  EXPECT_THROW(validate(s), Error);
}

}  // namespace
}  // namespace strata
