// The optimizer step of one pipeline stage (or tensor shard) replicated over
// its data-parallel group: the gradients summed over the group, the global
// gradient norm (clipping, loss scaling's skip), and the update of what this
// rank owns. The home of the ZeRO stages:
//   zero 0  every rank updates the whole stage (plain data parallelism; the
//           gradients allreduced in buckets during the last backward,
//           GradientSync);
//   zero 1  each rank owns a shard of the stage (strategies/shard_map.hpp:
//           a slice of every unit): the gradients are reduce-scattered onto
//           it unit by unit as backward completes each unit
//           (GradientReduceScatter, overlapped like the buckets), its
//           optimizer state and fp32 master weights are its shard's only,
//           and the updated shard is all-gathered unit by unit;
//   zero 2  as 1, and the stage keeps no whole gradient buffer: its units
//           take turns in two unit buffers, each reduce-scattered and added
//           into the shard as soon as backward completes it, in every
//           backward of the step (the stage is built with the units of
//           zero2_grad_units; under --reproducible it stays flat, as ZeRO-1,
//           since the exact twin follows the flat buffer);
//   zero 3  as 2, and the stage keeps no whole parameter buffer either: the
//           shard is the only copy, each unit gathered just before its
//           layers run (strategies/parameter_gather.hpp; the stage is built
//           with the same units for its parameters).
// The engine (strategies/model_parallel.hpp) calls begin() before a step's
// first backward and step() after its last.
#pragma once

#include "layers/optimizer.hpp"
#include "layers/sequential.hpp"
#include "strategies/gradient_reduce_scatter.hpp"
#include "strategies/gradient_sync.hpp"
#include "strategies/mesh.hpp"
#include "strategies/mixed_precision.hpp"
#include "strategies/parameter_gather.hpp"
#include "strategies/shard_map.hpp"
#include "strategies/stage_ties.hpp"

#include <cstddef>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

namespace strata {

template <class T>
class ShardedOptimizer {
 public:
  // stage: built, its parameters initialised; ties: the stage's tied
  // weights across stages (their copies count once in the norm);
  // micro_batches: backwards per step; initial: the initial values of layers
  // [first, last) (ZeRO-3: of units the stage does not hold); tied: the
  // stage's tied_pieces (gradient_reduce_scatter.hpp). Sharded, it sets the
  // stage's piece hooks (layers/param_pieces.hpp) while it lives.
  using InitialValues = std::function<std::vector<T>(std::size_t, std::size_t)>;
  ShardedOptimizer(Context& ctx, Mesh& mesh, Sequential<T>& stage,
                   const MixedPrecisionOptions& precision, const GradSyncOptions& sync,
                   int zero, const OptimizerConfig& config, const StageTies<T>& ties,
                   std::size_t micro_batches, const InitialValues& initial,
                   const std::vector<bool>& tied);
  ~ShardedOptimizer();

  // A new step: nothing launched yet; info.comm_bytes will count the payload.
  void begin(StepInfo& info);
  // Before each backward of the step; last: the step's last.
  void backward_begins(bool last);
  // Backward hook: local layer k's gradients (and every later layer's) are
  // written (unsharded; sharded, the piece hooks do it).
  void layer_done(std::size_t k);
  // Whether every forward and backward pass communicates (ZeRO-2 and 3 over
  // more than one rank): then every rank runs the same passes, and a pass
  // without rows is one of these, which takes part in the collectives only.
  bool communicates_per_pass() const;
  void idle_forward();
  void idle_backward(bool last);
  // After the last backward (and the tied gradients' sum): finishes the
  // sums, takes the norm the precision policy needs, updates this rank's
  // values and gathers the updated parameters (sharded).
  void step(StepInfo& info);
  // Sets the stage's parameters (stage order, host; a checkpoint): the
  // flat buffer or the shard, and with a 16-bit precision the master
  // weights and their rounded working copies. Collective over dp.
  void set_params(const std::vector<T>& stage_values);

  // The loss scale the next step's loss gradient is multiplied by (1 without loss scaling).
  double loss_scale() const { return mixed_->loss_scale(); }
  Optimizer<T>& optimizer() { return *optimizer_; }
  MixedPrecision<T>& precision() { return *mixed_; }
  // How the stage is split over the data-parallel group when sharded
  // (optimizer state and master weights are in shard order), else nullptr
  // (they are in the stage's flat order).
  const ShardMap* shards() const { return rs_ ? &rs_->map() : nullptr; }
  int zero() const { return zero_; }

 private:
  // The ranges of the updated gradients (flat or shard order) this rank
  // counts in the global norm: every gradient of the whole model once.
  void count_gradients(const StageTies<T>& ties);
  // This rank's share of the sum of squares of the gradients.
  double unique_sumsq();
  void gather_params();

  Context& ctx_;
  Mesh& mesh_;
  Sequential<T>& stage_;
  int zero_;
  bool last_ = true;  // the current backward is the step's last
  bool holds_ = false;  // layers up to held_ wait for the tie sum (zero 0)
  std::size_t held_ = 0;
  std::unique_ptr<GradientSync<T>> sync_;            // zero 0 (or one rank)
  std::unique_ptr<GradientReduceScatter<T>> rs_;     // sharded
  std::unique_ptr<ParameterGather<T>> gather_;       // ZeRO-3
  VectorBuffer<T> shard_params_;                     // sharded: the working values of the shard
  VectorBuffer<T> gather_pad_;                       // sharded: padded copies of uneven units
  std::vector<std::size_t> gather_at_;
  Vector<T> grads_;                                  // what the optimizer reads
  std::unique_ptr<Optimizer<T>> optimizer_;
  std::unique_ptr<MixedPrecision<T>> mixed_;  // master weights, loss scaling, fused step
  std::vector<std::pair<std::size_t, std::size_t>> counted_;
};

}  // namespace strata
