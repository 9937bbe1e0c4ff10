#include "layers/optimizer.hpp"

#include "backends/error.hpp"
#include "backends/exact_sum.hpp"
#include "backends/launch.hpp"

#include <algorithm>
#include <cmath>

namespace strata {

OptimizerKind parse_optimizer(const std::string& name) {
  for (OptimizerKind k : {OptimizerKind::sgd, OptimizerKind::adam, OptimizerKind::adamw})
    if (name == to_string(k)) return k;
  STRATA_THROW(config, "unknown optimizer '", name, "' (expected sgd, adam or adamw)");
}

const char* to_string(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::sgd: return "sgd";
    case OptimizerKind::adam: return "adam";
    case OptimizerKind::adamw: return "adamw";
  }
  return "?";
}

void validate(const OptimizerConfig& config) {
  STRATA_REQUIRE(config.lr >= 0 && std::isfinite(config.lr), config,
                 "optimizer: learning rate must be finite and >= 0, got ", config.lr);
  STRATA_REQUIRE(config.momentum >= 0 && config.momentum < 1, config,
                 "optimizer: momentum must be in [0, 1), got ", config.momentum);
  STRATA_REQUIRE(config.weight_decay >= 0, config,
                 "optimizer: weight decay must be >= 0, got ", config.weight_decay);
  STRATA_REQUIRE(!config.nesterov || config.momentum > 0, config,
                 "optimizer: Nesterov momentum needs momentum > 0");
  STRATA_REQUIRE(config.beta1 >= 0 && config.beta1 < 1 && config.beta2 >= 0 && config.beta2 < 1,
                 config, "optimizer: betas must be in [0, 1), got ", config.beta1, ", ",
                 config.beta2);
  STRATA_REQUIRE(config.eps > 0, config, "optimizer: eps must be > 0, got ", config.eps);
}

template <class T>
Optimizer<T>::Optimizer(const OptimizerConfig& config, std::size_t n) : config_(config), n_(n) {
  validate(config);
  if (config.kind == OptimizerKind::sgd) {
    if (config.momentum > 0) state0_ = VectorBuffer<T>("strata::sgd::momentum", n);
  } else {
    state0_ = VectorBuffer<T>("strata::adam::m", n);
    state1_ = VectorBuffer<T>("strata::adam::v", n);
  }
}

template <class T>
double largest_magnitude(Context& ctx, ConstVector<T> g) {
  double largest = 0;
  Kokkos::parallel_reduce("strata::grad_max", Range(ctx.exec, 0, g.extent(0)),
      KOKKOS_LAMBDA(const std::size_t i, double& m) {
        const double v = kmath::fabs(static_cast<double>(g(i)));
        m = v > m || v != v ? v : m;  // a NaN wins
      },
      Kokkos::Max<double>(largest));
  return largest;
}

int squares_scale(double largest) {
  int e = 0;
  if (largest > 0 && std::isfinite(largest)) std::frexp(largest, &e);  // largest < 2^e
  return e;
}

template <class T>
ExactSum scaled_sum_of_squares(Context& ctx, ConstVector<T> g, int e) {
  const double down = std::ldexp(1.0, -e);
  ExactSum sum;
  sum_range(ctx, "strata::grad_sumsq_exact", g.extent(0),
      KOKKOS_LAMBDA(const std::size_t i, ExactSum& acc) {
        const double v = static_cast<double>(g(i)) * down;
        acc.add(v * v);
      },
      sum);
  return sum;
}

namespace {
template <class T>
double exact_sum_of_squares(Context& ctx, ConstVector<T> g) {
  const double largest = largest_magnitude(ctx, g);
  if (!(largest > 0) || !std::isfinite(largest)) return largest * largest;
  const int e = squares_scale(largest);
  return std::ldexp(scaled_sum_of_squares(ctx, g, e).value(), 2 * e);
}
}  // namespace

template <class T>
double sum_of_squares(Context& ctx, ConstVector<T> g) {
  if (ctx.reproducible) return exact_sum_of_squares(ctx, g);
  double sumsq = 0;
  sum_range(ctx, "strata::grad_sumsq", g.extent(0),
      KOKKOS_LAMBDA(const std::size_t i, double& acc) {
        const double v = static_cast<double>(g(i));
        acc += v * v;
      },
      sumsq);
  return sumsq;
}

namespace detail::fused {
// Copies of an updated parameter: none, the parameter rounded to L in a
// float buffer (working weights), or any set of copies (checked per element).
struct NoCopy {
  template <class T>
  KOKKOS_INLINE_FUNCTION void operator()(const std::size_t, const T) const {}
};
template <class L>
struct RoundedCopy {
  Vector<float> r;
  template <class T>
  KOKKOS_INLINE_FUNCTION void operator()(const std::size_t i, const T p) const {
    r(i) = round_to<L>(static_cast<float>(p));
  }
};
struct Copies {
  Vector<bf16> b;
  Vector<fp16> h;
  Vector<float> r;
  Precision rp;

  template <class T>
  KOKKOS_INLINE_FUNCTION void operator()(const std::size_t i, const T p) const {
    const float f = static_cast<float>(p);
    if (b.extent(0) != 0) b(i) = bf16(f);
    if (h.extent(0) != 0) h(i) = fp16(f);
    if (r.extent(0) != 0) r(i) = rp == Precision::bf16 ? round_to<bf16>(f)
                                 : rp == Precision::fp16 ? round_to<fp16>(f) : f;
  }
};
// Weight decay per parameter: one value for all, or zero where the mask is
// (parameter groups: no decay on biases and normalisation parameters).
template <class T>
struct UniformDecay {
  T wd;
  KOKKOS_INLINE_FUNCTION T operator()(const std::size_t) const { return wd; }
};
template <class T>
struct MaskedDecay {
  T wd;
  ConstVector<T> mask;  // 1: decayed, 0: not
  KOKKOS_INLINE_FUNCTION T operator()(const std::size_t i) const { return wd * mask(i); }
};
}  // namespace detail::fused

template <class T>
void Optimizer<T>::set_no_decay(const std::vector<std::pair<std::size_t, std::size_t>>& ranges) {
  decay_ = VectorBuffer<T>();
  if (ranges.empty() || config_.weight_decay == 0) return;
  std::vector<T> mask(n_, T(1));
  for (const auto& [first, last] : ranges) {
    STRATA_REQUIRE(first <= last && last <= n_, config, "no-decay range [", first, ", ", last,
                   ") outside the optimizer's ", n_, " parameters");
    std::fill(mask.begin() + static_cast<std::ptrdiff_t>(first),
              mask.begin() + static_cast<std::ptrdiff_t>(last), T(0));
  }
  decay_ = VectorBuffer<T>("strata::Optimizer::decay", n_);
  Kokkos::deep_copy(decay_, Kokkos::View<const T*, Kokkos::HostSpace, Unmanaged>(mask.data(), n_));
}

std::vector<std::pair<std::size_t, std::size_t>> no_decay_ranges(
    const std::vector<ParamInfo>& params, std::size_t first, std::size_t count) {
  std::vector<std::pair<std::size_t, std::size_t>> ranges;
  for (const auto& t : params) {
    if (t.group != ParamGroup::no_decay) continue;
    const std::size_t lo = std::max(t.offset, first);
    const std::size_t hi = std::min(t.offset + t.shape.numel(), first + count);
    if (lo < hi) ranges.push_back({lo - first, hi - first});
  }
  return ranges;
}

template <class T>
void Optimizer<T>::step(Context& ctx, Vector<T> p, ConstVector<T> g) {
  STRATA_REQUIRE(p.extent(0) == n_ && g.extent(0) == n_, config, "optimizer for ", n_,
                 " parameters got buffers of ", p.extent(0), " and ", g.extent(0));
  ++steps_;
  // The fused update with gradients multiplied by 1 (exact) and no copy.
  fused_update(ctx, p, g, T(1), detail::fused::NoCopy{});
}

template <class T>
FusedResult Optimizer<T>::step_fused(Context& ctx, Vector<T> p, ConstVector<T> g,
                                     const FusedStep& fused) {
  STRATA_REQUIRE(p.extent(0) == n_ && g.extent(0) == n_, config, "optimizer for ", n_,
                 " parameters got buffers of ", p.extent(0), " and ", g.extent(0));
  for (std::size_t e : {fused.copy_bf16.extent(0), fused.copy_fp16.extent(0), fused.copy_rounded.extent(0)})
    STRATA_REQUIRE(e == 0 || e == n_, config, "fused optimizer step: a parameter copy of ", e,
                   " elements for ", n_, " parameters");
  STRATA_REQUIRE(fused.inv_scale > 0 && std::isfinite(fused.inv_scale), config,
                 "fused optimizer step: inverse loss scale must be finite and > 0, got ",
                 fused.inv_scale);
  STRATA_REQUIRE(fused.max_norm >= 0, config, "clip-grad-norm must be >= 0, got ", fused.max_norm);
  // One reduction: the sum of squares in double (no overflow for any float
  // gradient; an Inf or a NaN makes it non-finite).
  const double sumsq = fused.sumsq ? *fused.sumsq : sum_of_squares(ctx, g);
  FusedResult r;
  r.finite = std::isfinite(sumsq);
  r.grad_norm = std::sqrt(sumsq) * fused.inv_scale;
  if (!r.finite && fused.skip_nonfinite) {
    r.applied = false;
    return r;
  }
  // torch.nn.utils.clip_grad_norm_: coef = max_norm / (norm + 1e-6), at most 1.
  if (fused.max_norm > 0 && r.finite)
    r.clip_coef = std::min(1.0, fused.max_norm / (r.grad_norm + 1e-6));
  const T f = static_cast<T>(fused.inv_scale * r.clip_coef);
  ++steps_;
  using namespace detail::fused;
  const bool only_rounded = fused.copy_bf16.extent(0) == 0 && fused.copy_fp16.extent(0) == 0;
  if (only_rounded && fused.copy_rounded.extent(0) == 0)
    fused_update(ctx, p, g, f, NoCopy{});
  else if (only_rounded && fused.copy_precision == Precision::bf16)
    fused_update(ctx, p, g, f, RoundedCopy<bf16>{fused.copy_rounded});
  else if (only_rounded && fused.copy_precision == Precision::fp16)
    fused_update(ctx, p, g, f, RoundedCopy<fp16>{fused.copy_rounded});
  else
    fused_update(ctx, p, g, f,
                 Copies{fused.copy_bf16, fused.copy_fp16, fused.copy_rounded, fused.copy_precision});
  return r;
}

template <class T>
template <class Copy>
void Optimizer<T>::fused_update(Context& ctx, Vector<T> p, ConstVector<T> g, const T f,
                                const Copy& copy) {
  const T wd = static_cast<T>(config_.weight_decay);
  if (decay_.extent(0) > 0)
    fused_update(ctx, p, g, f, copy, detail::fused::MaskedDecay<T>{wd, decay_});
  else
    fused_update(ctx, p, g, f, copy, detail::fused::UniformDecay<T>{wd});
}

template <class T>
template <class Copy, class Decay>
void Optimizer<T>::fused_update(Context& ctx, Vector<T> p, ConstVector<T> g, const T f,
                                const Copy& copy, const Decay& wd) {
  // SGD (with momentum, Nesterov), Adam and AdamW on g * f; step() is f = 1.
  // wd(i): the weight decay of parameter i.
  const T lr = static_cast<T>(config_.lr);
  Vector<T> s0 = state0_, s1 = state1_;
  if (config_.kind == OptimizerKind::sgd) {
    const T mu = static_cast<T>(config_.momentum);
    const bool first = steps_ == 1, nesterov = config_.nesterov;
    if (config_.momentum == 0) {
      for_range(ctx, "strata::sgd_fused", n_,
                           KOKKOS_LAMBDA(const std::size_t i) {
                             const T gi = g(i) * f;
                             p(i) -= lr * (gi + wd(i) * p(i));
                             copy(i, p(i));
                           });
    } else {
      for_range(ctx, "strata::sgd_momentum_fused", n_,
                           KOKKOS_LAMBDA(const std::size_t i) {
                             const T d = g(i) * f + wd(i) * p(i);
                             const T b = first ? d : mu * s0(i) + d;
                             s0(i) = b;
                             p(i) -= lr * (nesterov ? d + mu * b : b);
                             copy(i, p(i));
                           });
    }
    return;
  }
  const T b1 = static_cast<T>(config_.beta1), b2 = static_cast<T>(config_.beta2);
  const T eps = static_cast<T>(config_.eps);
  const T c1 = static_cast<T>(1.0 - std::pow(config_.beta1, static_cast<double>(steps_)));
  const T c2 = static_cast<T>(std::sqrt(1.0 - std::pow(config_.beta2, static_cast<double>(steps_))));
  const T step_size = lr / c1;
  const bool decoupled = config_.kind == OptimizerKind::adamw;
  for_range(ctx, "strata::adam_fused", n_, KOKKOS_LAMBDA(const std::size_t i) {
    T pi = p(i);
    T gi = g(i) * f;
    if (decoupled)
      pi -= lr * wd(i) * pi;
    else
      gi += wd(i) * pi;
    const T m = b1 * s0(i) + (T(1) - b1) * gi;
    const T v = b2 * s1(i) + (T(1) - b2) * gi * gi;
    s0(i) = m;
    s1(i) = v;
    const T pn = pi - step_size * m / (kmath::sqrt(v) / c2 + eps);
    p(i) = pn;
    copy(i, pn);
  });
}

template class Optimizer<float>;
template class Optimizer<double>;
template double sum_of_squares<float>(Context&, ConstVector<float>);
template double largest_magnitude<float>(Context&, ConstVector<float>);
template double largest_magnitude<double>(Context&, ConstVector<double>);
template ExactSum scaled_sum_of_squares<float>(Context&, ConstVector<float>, int);
template ExactSum scaled_sum_of_squares<double>(Context&, ConstVector<double>, int);
template double sum_of_squares<double>(Context&, ConstVector<double>);

}  // namespace strata
