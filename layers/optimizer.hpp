// Optimizers on the flat parameter and gradient buffers: one kernel per step
// over every parameter. Semantics follow PyTorch's torch.optim:
//   SGD:   g += wd p; buf = momentum buf + g (buf = g on the first step);
//          g = nesterov ? g + momentum buf : buf (when momentum > 0); p -= lr g
//   Adam:  g += wd p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//          p -= lr (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
//   AdamW: p -= lr wd p, then Adam without the g += wd p term.
#pragma once

#include "backends/context.hpp"
#include "backends/exact_sum.hpp"
#include "backends/precision.hpp"
#include "layers/layer.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace strata {

enum class OptimizerKind { sgd, adam, adamw };
OptimizerKind parse_optimizer(const std::string& name);  // throws config
const char* to_string(OptimizerKind kind);

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::sgd;
  double lr = 0.01;
  double momentum = 0.0;  // SGD
  bool nesterov = false;  // SGD
  double weight_decay = 0.0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // Adam, AdamW
  // Parameter groups: no weight decay on biases and normalisation parameters
  // (ParamGroup::no_decay; the strategies pass the ranges, Optimizer::set_no_decay).
  bool no_decay_bias_norm = false;
};

// Throws config naming the first setting out of range.
void validate(const OptimizerConfig& config);

// Elements of state an optimizer over n parameters keeps (memory accounting).
inline std::size_t state_elements(const OptimizerConfig& config, std::size_t n) {
  if (config.kind == OptimizerKind::sgd) return config.momentum > 0 ? n : 0;
  return 2 * n;  // Adam, AdamW: first and second moments
}

// What the fused step does besides the update (mixed precision, clipping).
struct FusedStep {
  double inv_scale = 1.0;  // gradients are multiplied by this first (1 / loss scale)
  double max_norm = 0.0;   // > 0: clip the unscaled gradients to this global L2 norm
  bool skip_nonfinite = true;  // no update when a gradient is Inf or NaN
  // The sum of squares of the (scaled) gradients of the whole model when
  // these are only a part of them (model parallelism: the strategy sums
  // every rank's share); empty: the sum over the gradients given.
  std::optional<double> sumsq;
  // A 16-bit copy of the updated parameters, written when not empty (n elements).
  Vector<bf16> copy_bf16;
  Vector<fp16> copy_fp16;
  // A float copy holding the updated parameters rounded to copy_precision
  // (bf16 or fp16): the working weights (16-bit values in float buffers, for sgemm).
  Vector<float> copy_rounded;
  Precision copy_precision = Precision::fp32;
};

struct FusedResult {
  bool finite = true;      // every gradient was finite
  bool applied = true;     // the update happened (false: skipped, non-finite)
  double grad_norm = 0;    // L2 norm of the unscaled gradients, before clipping
  double clip_coef = 1;    // factor applied to the unscaled gradients (<= 1)
};

// Sum of the squares of g in double (an Inf or a NaN makes it non-finite);
// with ctx.reproducible, exact (the same bits for any thread count).
template <class T>
double sum_of_squares(Context& ctx, ConstVector<T> g);
// Its reproducible parts, for a sum split over ranks: the largest |g(i)|
// (NaN when one is), e with largest < 2^e (0 for 0 or non-finite), and the
// exact sum of (g(i) 2^-e)^2; the sum of squares is that value times 4^e.
// Squares below 2^-54 of the largest's are rounded away.
template <class T>
double largest_magnitude(Context& ctx, ConstVector<T> g);
int squares_scale(double largest);
template <class T>
ExactSum scaled_sum_of_squares(Context& ctx, ConstVector<T> g, int e);

template <class T>
class Optimizer {
 public:
  // n: number of parameters it updates (state buffers are allocated here).
  Optimizer(const OptimizerConfig& config, std::size_t n);

  // params -= update(grads); both (n), device memory.
  void step(Context& ctx, Vector<T> params, ConstVector<T> grads);

  // The fused step: one reduction over the gradients (sum of squares, in
  // double: the global norm and the finiteness check), then one kernel that
  // unscales (and clips) each gradient, applies the update of step() to the
  // parameters (fp32 master weights) and writes the requested copies. With
  // inv_scale 1 and no clipping the parameters equal step()'s bitwise. A
  // skipped step leaves parameters, state and steps() unchanged.
  FusedResult step_fused(Context& ctx, Vector<T> params, ConstVector<T> grads,
                         const FusedStep& fused);

  const OptimizerConfig& config() const { return config_; }
  void set_lr(double lr) { config_.lr = lr; }
  std::int64_t steps() const { return steps_; }
  std::size_t size() const { return n_; }
  // State for checkpoints: momentum buffer (SGD) or first and second moments.
  Vector<T> state0() const { return state0_; }
  Vector<T> state1() const { return state1_; }
  void set_steps(std::int64_t steps) { steps_ = steps; }
  // Bytes of optimizer state.
  std::size_t state_bytes() const { return (state0_.extent(0) + state1_.extent(0)) * sizeof(T); }

  // step_fused's update with gradients multiplied by f; copy(i, p) writes
  // the copies of updated parameter i (a type per kind of copy, so that the
  // common cases compile to branch-free, vectorisable loops). Public only
  // because CUDA refuses device lambdas in private member functions.
  template <class Copy>
  void fused_update(Context& ctx, Vector<T> p, ConstVector<T> g, T f, const Copy& copy);
  // The same with the weight decay of parameter i given by wd(i).
  template <class Copy, class Decay>
  void fused_update(Context& ctx, Vector<T> p, ConstVector<T> g, T f, const Copy& copy,
                    const Decay& wd);

  // No weight decay for the parameters in these [first, last) ranges (of
  // this optimizer's n); empty: the same decay for all.
  void set_no_decay(const std::vector<std::pair<std::size_t, std::size_t>>& ranges);

 private:
  OptimizerConfig config_;
  std::size_t n_;
  std::int64_t steps_ = 0;
  VectorBuffer<T> state0_, state1_;
  VectorBuffer<T> decay_;  // per parameter 1 or 0 (set_no_decay); empty: uniform
};

// The parts of the no_decay tensors of `params` that fall in [first, first +
// count) of the flat buffer, relative to first (an optimizer over that slice).
std::vector<std::pair<std::size_t, std::size_t>> no_decay_ranges(
    const std::vector<ParamInfo>& params, std::size_t first, std::size_t count);

}  // namespace strata
