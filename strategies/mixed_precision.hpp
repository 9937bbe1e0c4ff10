// Mixed-precision training shared by the strategies (DataParallel,
// ModelParallel): the options, fp32 master weights behind 16-bit working
// weights, dynamic loss scaling, and the fused optimizer step that unscales,
// clips, updates the master weights and writes the rounded working weights.
//
// A strategy holds one MixedPrecision over the parameters its optimizer
// updates on this rank (the whole model, a pipeline stage, or a ZeRO-1
// block), multiplies its loss gradient by loss_scale(), and calls step()
// with the summed gradients. Where the gradients of the whole model are
// spread over ranks, the strategy passes the global sum of their squares
// (each gradient counted once), so that every rank takes the same clipping
// coefficient and the same skip decision.
#pragma once

#include "backends/precision.hpp"
#include "layers/loss_scaler.hpp"
#include "layers/optimizer.hpp"

#include <memory>
#include <optional>
#include <type_traits>

namespace strata {

struct MixedPrecisionOptions {
  // bf16/fp16: the model stores activations in that precision (it is built
  // with it: BuildOptions::numerics.storage) and computes with working weights rounded to it, while the
  // optimizer updates fp32 master weights (float models only).
  Precision precision = Precision::fp32;
  // With a 16-bit precision: keep activations in float buffers holding the
  // rounded values (the emulated storage, bitwise the same training with
  // more memory) instead of 16-bit buffers. For tests and comparisons.
  bool emulate_storage = false;
  double clip_grad_norm = 0;  // > 0: clip gradients to this global L2 norm
  bool loss_scaling = false;  // dynamic loss scaling (for fp16)
  LossScalerConfig scaler;
};

// Throws config for a 16-bit precision on a non-float model or a bad clip norm.
template <class T>
void validate(const MixedPrecisionOptions& o, const char* who);

// x(i) = x(i) rounded to p (working weights; nothing for fp32 or a non-float T).
template <class T>
void round_to_precision(Context& ctx, Precision p, Vector<T> x) {
  if constexpr (std::is_same_v<T, float>) round_in_place(ctx.exec, p, x);
  else (void)ctx, (void)p, (void)x;
}

// What the last step did (mixed precision and compression).
struct StepInfo {
  bool applied = true;          // false: skipped (non-finite gradients, loss scaling)
  double grad_norm = 0;         // global L2 norm of the gradients (fused steps only)
  double loss_scale = 1;        // the scale this step's loss gradient was multiplied by
  std::size_t comm_bytes = 0;   // payload bytes this rank gave to gradient allreduces
};

template <class T>
class MixedPrecision {
 public:
  // params: the working parameters this rank's optimizer updates (device
  // memory, outliving this object). With a 16-bit precision their current
  // values become the master weights and they are rounded in place.
  MixedPrecision(Context& ctx, const MixedPrecisionOptions& options, Vector<T> params);

  const MixedPrecisionOptions& options() const { return options_; }
  // Whether step() takes the fused path (16-bit precision, clipping or scaling).
  bool fused() const { return fused_; }
  // The factor of this step's loss gradient (1 without loss scaling).
  double loss_scale() const { return scaler_ ? scaler_->scale() : 1.0; }
  // The weights the optimizer updates: the master weights with a 16-bit
  // precision, else the parameters. After writing them, sync_working().
  Vector<T> master() const;
  void sync_working(Context& ctx);
  DynamicLossScaler* scaler() { return scaler_.get(); }

  // One optimizer step with the summed (scaled) gradients of the parameters;
  // sumsq: the global sum of squares of the scaled gradients when they are
  // spread over ranks (default: computed over grads). Fills applied,
  // grad_norm and loss_scale of info.
  void step(Context& ctx, Optimizer<T>& optimizer, ConstVector<T> grads, StepInfo& info,
            std::optional<double> sumsq = std::nullopt);

 private:
  MixedPrecisionOptions options_;
  Vector<T> params_;
  bool fused_ = false;
  VectorBuffer<T> master_;  // fp32 master weights (16-bit precision)
  std::unique_ptr<DynamicLossScaler> scaler_;
};

}  // namespace strata
