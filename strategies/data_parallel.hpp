// Data parallelism over any communicator: Strata's DistributedDataParallel.
//
// Every rank holds the whole model. Rank 0's parameters are broadcast at
// construction; each step, a rank runs forward and backward on its shard of
// the global batch, gradients are summed over ranks (each rank's loss
// gradient is already scaled by 1 / global batch, so the sum is the mean over
// the global batch, uneven shards included), and every rank applies the same
// optimizer step to identical gradients.
//
// Gradients are summed by GradientSync (strategies/gradient_sync.hpp):
// buckets whose allreduce starts during backward, optional 16-bit
// compression; the optimizer waits for all.
// SyncBatchNorm: the model gets a BatchGroup over this communicator
// (strategies/comm_batch_group.hpp), which the BatchNorm layers of a model
// with sync_batchnorm = true use (layers/batchnorm.hpp).
// Gradient accumulation: with several micro-batches per step, the backward
// passes of all but the last accumulate locally without communication.
#pragma once

#include "backends/comm/communicator.hpp"
#include "data/loader.hpp"
#include "backends/precision.hpp"
#include "layers/loss.hpp"
#include "layers/loss_scaler.hpp"
#include "layers/optimizer.hpp"
#include "layers/sequential.hpp"
#include "strategies/comm_batch_group.hpp"
#include "strategies/gradient_sync.hpp"
#include "strategies/mixed_precision.hpp"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace strata {

// Precision, clipping and loss scaling: MixedPrecisionOptions; buckets,
// overlap and compression: GradSyncOptions.
struct DataParallelOptions : MixedPrecisionOptions, GradSyncOptions {};

// Where the time of the last step went (seconds, this rank).
struct StepTiming {
  double compute_s = 0;        // forward + backward (including launching buckets in it)
  double exposed_comm_s = 0;   // launching the rest and waiting for the buckets after backward
  double optimizer_s = 0;
};

template <class T>
class DataParallel {
 public:
  DataParallel(Context& ctx, comm::Communicator& comm, Sequential<T>& model, Loss<T>& loss,
               Optimizer<T>& optimizer, const DataParallelOptions& options = {});

  // One optimizer step on this rank's micro-batches (usually one).
  // global_samples: samples in all micro-batches of all ranks. Returns the
  // mean loss over those samples, identical on every rank.
  double step(const data::Batch<T>* micro, std::size_t count, std::size_t global_samples);
  double step(const std::vector<data::Batch<T>>& micro, std::size_t global_samples) {
    return step(micro.data(), micro.size(), global_samples);
  }
  double step(const data::Batch<T>& shard, std::size_t global_samples) {
    return step(&shard, 1, global_samples);
  }

  // Buckets as [first, last) ranges of the flat gradient buffer, in launch order.
  const std::vector<std::pair<std::size_t, std::size_t>>& buckets() const { return sync_->buckets(); }
  const StepTiming& last_timing() const { return timing_; }
  const StepInfo& last_info() const { return info_; }
  comm::Communicator& communicator() { return comm_; }
  // BatchNorm layers that normalise over every rank (SyncBatchNorm).
  std::size_t synced_layers() const { return synced_layers_; }
  const DataParallelOptions& options() const { return options_; }

  // The weights the optimizer updates: fp32 master weights with a 16-bit
  // precision, else the model's parameters. After writing them (restoring a
  // checkpoint), call sync_working_params().
  Vector<T> master_params() const;
  void sync_working_params();
  // The loss scaler (nullptr without loss scaling): its state is a checkpoint's.
  DynamicLossScaler* scaler() { return mixed_->scaler(); }

 private:
  Context& ctx_;
  comm::Communicator& comm_;
  Sequential<T>& model_;
  std::unique_ptr<CommBatchGroup<T>> batch_group_;  // SyncBatchNorm
  std::size_t synced_layers_ = 0;                   // the layers that use it
  Loss<T>& loss_;
  Optimizer<T>& optimizer_;
  DataParallelOptions options_;
  std::unique_ptr<GradientSync<T>> sync_;
  StepTiming timing_;
  StepInfo info_;
  std::unique_ptr<MixedPrecision<T>> mixed_;   // master weights, loss scaling, fused step
};

}  // namespace strata
