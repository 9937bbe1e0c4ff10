// The optimizer step of one pipeline stage (or tensor shard) replicated over
// its data-parallel group: the gradients summed over the group
// (GradientSync: buckets launched during the last backward), the global
// gradient norm (clipping, loss scaling's skip), and the update of what this
// rank owns. The home of the ZeRO stages:
//   zero 0  every rank updates the whole stage (plain data parallelism);
//   zero 1  each rank owns a 1/dp block of the padded flat buffers: the
//           gradients are reduce-scattered onto it, its optimizer state and
//           fp32 master weights are its block's only, and the updated
//           parameters are all-gathered.
// The engine (strategies/model_parallel.hpp) calls begin() before a step's
// first backward and step() after its last.
#pragma once

#include "layers/optimizer.hpp"
#include "layers/sequential.hpp"
#include "strategies/gradient_sync.hpp"
#include "strategies/mesh.hpp"
#include "strategies/mixed_precision.hpp"
#include "strategies/stage_ties.hpp"

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

namespace strata {

template <class T>
class ShardedOptimizer {
 public:
  // stage: built, its parameters initialised (padded to a multiple of dp
  // with ZeRO-1); ties: the stage's tied weights across stages (their
  // copies count once in the norm).
  ShardedOptimizer(Context& ctx, Mesh& mesh, Sequential<T>& stage,
                   const MixedPrecisionOptions& precision, const GradSyncOptions& sync,
                   int zero, const OptimizerConfig& config, const StageTies<T>& ties);

  // A new step: nothing launched yet; info.comm_bytes will count the payload.
  void begin(StepInfo& info) { sync_->begin(info); }
  // Backward hook: local layer k's gradients (and every later layer's) are written.
  void layer_done(std::size_t k) { sync_->layer_done(k); }
  // After the last backward (and the tied gradients' sum): finishes the
  // sums, takes the norm the precision policy needs, updates this rank's
  // block and gathers the updated parameters (ZeRO-1).
  void step(StepInfo& info);

  // The loss scale the next step's loss gradient is multiplied by (1 without loss scaling).
  double loss_scale() const { return mixed_->loss_scale(); }
  Optimizer<T>& optimizer() { return *optimizer_; }
  MixedPrecision<T>& precision() { return *mixed_; }
  // What this rank updates: a block of the stage's padded flat buffers.
  std::pair<std::size_t, std::size_t> owned() const { return owned_; }
  int zero() const { return zero_; }

 private:
  // The ranges of the stage's gradients this rank counts in the global
  // norm: every gradient of the whole model once.
  void count_gradients(const StageTies<T>& ties);
  // This rank's share of the sum of squares of the gradients.
  double unique_sumsq();

  Context& ctx_;
  Mesh& mesh_;
  Sequential<T>& stage_;
  int zero_;
  std::unique_ptr<GradientSync<T>> sync_;
  std::unique_ptr<Optimizer<T>> optimizer_;
  std::unique_ptr<MixedPrecision<T>> mixed_;  // master weights, loss scaling, fused step
  std::pair<std::size_t, std::size_t> owned_;
  std::vector<std::pair<std::size_t, std::size_t>> counted_;
};

}  // namespace strata
