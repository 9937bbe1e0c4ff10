// Data parallelism over any communicator: Strata's DistributedDataParallel.
//
// Every rank holds the whole model. Rank 0's parameters are broadcast at
// construction; each step, a rank runs forward and backward on its shard of
// the global batch, gradients are summed over ranks (each rank's loss
// gradient is already scaled by 1 / global batch, so the sum is the mean over
// the global batch, uneven shards included), and every rank applies the same
// optimizer step to identical gradients.
//
// Buckets: the flat gradient buffer is cut into contiguous buckets of about
// bucket_bytes, in the order backward produces them (last layer first). A
// bucket's allreduce starts, asynchronously, as soon as backward has written
// its last gradient, while backward goes on; the optimizer waits for all.
// Gradient accumulation: with several micro-batches per step, the backward
// passes of all but the last accumulate locally without communication.
#pragma once

#include "backends/comm/communicator.hpp"
#include "data/loader.hpp"
#include "layers/loss.hpp"
#include "layers/optimizer.hpp"
#include "layers/sequential.hpp"

#include <utility>
#include <vector>

namespace strata {

struct DataParallelOptions {
  std::size_t bucket_bytes = std::size_t(25) << 20;  // 0: a single bucket
  bool overlap = true;  // start buckets during backward (else after it)
};

// Where the time of the last step went (seconds, this rank).
struct StepTiming {
  double compute_s = 0;        // forward + backward (including launching buckets)
  double exposed_comm_s = 0;   // waiting for gradient buckets after backward
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
  const std::vector<std::pair<std::size_t, std::size_t>>& buckets() const { return buckets_; }
  const StepTiming& last_timing() const { return timing_; }
  comm::Communicator& communicator() { return comm_; }

 private:
  void launch(std::size_t b);
  void finish();

  Context& ctx_;
  comm::Communicator& comm_;
  Sequential<T>& model_;
  Loss<T>& loss_;
  Optimizer<T>& optimizer_;
  DataParallelOptions options_;
  std::vector<std::pair<std::size_t, std::size_t>> buckets_;
  std::vector<comm::Handle> handles_;
  std::size_t launched_ = 0;
  // Host copies of the buckets when the gradients are device memory and the
  // communicator needs host memory.
  bool staged_ = false;
  std::vector<std::vector<T>> staging_;
  StepTiming timing_;
};

}  // namespace strata
