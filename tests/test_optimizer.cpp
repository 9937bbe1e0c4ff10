// Optimizers against hand-computed steps and against a naive host
// implementation of PyTorch's update rules over several steps.
#include "backends/error.hpp"
#include "layers/optimizer.hpp"
#include "test_utils.hpp"

#include <gtest/gtest.h>

#include <cmath>

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

TEST(Optimizer, MatchesReferenceOverManySteps) {
  const std::size_t n = 1001, steps = 25;
  const Vec p0 = test::randn<double>(n, 1);
  std::vector<Vec> grads;
  for (std::size_t t = 0; t < steps; ++t) grads.push_back(test::randn<double>(n, 10 + t));
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
  for (const auto& c : configs) {
    const Vec got = run(c, p0, grads), want = reference(c, p0, grads);
    for (std::size_t i = 0; i < n; ++i)
      ASSERT_NEAR(got[i], want[i], 1e-13) << to_string(c.kind) << " momentum " << c.momentum;
  }
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

}  // namespace
}  // namespace strata
