#include "strategies/mixed_precision.hpp"

#include "backends/error.hpp"

#include <cmath>
#include <type_traits>

namespace strata {

template <class T>
void validate(const MixedPrecisionOptions& o, const char* who) {
  STRATA_REQUIRE(o.precision == Precision::fp32 || (std::is_same_v<T, float>), config, who, ": ",
                 to_string(o.precision), " training needs a float model");
  STRATA_REQUIRE(o.clip_grad_norm >= 0 && std::isfinite(o.clip_grad_norm), config,
                 "clip-grad-norm must be finite and >= 0, got ", o.clip_grad_norm);
  if (o.loss_scaling) validate(o.scaler);
}

template <class T>
MixedPrecision<T>::MixedPrecision(Context& ctx, const MixedPrecisionOptions& options,
                                  Vector<T> params)
    : options_(options), params_(params) {
  validate<T>(options, "mixed precision");
  fused_ = options.precision != Precision::fp32 || options.clip_grad_norm > 0 ||
           options.loss_scaling;
  if (options.loss_scaling) scaler_ = std::make_unique<DynamicLossScaler>(options.scaler);
  if (options.precision != Precision::fp32) {
    master_ = VectorBuffer<T>("strata::master_weights", params.extent(0));
    Kokkos::deep_copy(ctx.exec, master_, params);
    sync_working(ctx);
  }
}

template <class T>
Vector<T> MixedPrecision<T>::master() const {
  return master_.extent(0) > 0 ? Vector<T>(master_) : params_;
}

template <class T>
void MixedPrecision<T>::sync_working(Context& ctx) {
  if (master_.extent(0) == 0) return;
  Kokkos::deep_copy(ctx.exec, params_, master_);
  round_to_precision(ctx, options_.precision, params_);
}

template <class T>
void MixedPrecision<T>::step(Context& ctx, Optimizer<T>& optimizer, ConstVector<T> grads,
                             StepInfo& info, std::optional<double> sumsq) {
  info.loss_scale = loss_scale();
  if (!fused_) {
    optimizer.step(ctx, params_, grads);
    return;
  }
  FusedStep f;
  f.inv_scale = 1.0 / info.loss_scale;
  f.max_norm = options_.clip_grad_norm;
  f.skip_nonfinite = scaler_ != nullptr;
  f.sumsq = sumsq;
  if constexpr (std::is_same_v<T, float>) {
    if (master_.extent(0) > 0) {
      f.copy_rounded = params_;
      f.copy_precision = options_.precision;
    }
  }
  const FusedResult r = optimizer.step_fused(ctx, master(), grads, f);
  info.grad_norm = r.grad_norm;
  info.applied = r.applied;
  if (scaler_) scaler_->update(r.finite);
}

template class MixedPrecision<float>;
template class MixedPrecision<double>;
template void validate<float>(const MixedPrecisionOptions&, const char*);
template void validate<double>(const MixedPrecisionOptions&, const char*);

}  // namespace strata
