// Gradient synchronisation over a data-parallel group: the one component
// that sums a model's gradients over the ranks that hold replicas of it, used
// by data parallelism (strategies/data_parallel.hpp) and by every stage and
// tensor shard of the model-parallel mesh (strategies/model_parallel.hpp).
//
//   GradientSync<float> sync(ctx, group, model, options);   // after model.build()
//   sync.begin(info);                          // each step, before backward
//   model.backward(ctx, [&](std::size_t k) { sync.layer_done(k); });  // last backward
//   sync.finish();                             // every gradient summed (or this rank's block)
//
// Buckets: the flat gradient buffer is cut into contiguous buckets of about
// bucket_bytes, in the order backward produces them (last layer first). With
// overlap, a bucket's allreduce starts, asynchronously, as soon as backward
// has written its last gradient (layer_done), while backward goes on;
// finish() launches what is left and waits for all.
// Compression: buckets travel in bf16 or fp16 (rounded to nearest even) and
// are summed in float, then widened back.
// Sharding (the ZeRO stages) reduce-scatters instead:
// strategies/gradient_reduce_scatter.hpp.
// Reproducible (a model built with exact sums, Numerics::exact_chunk): the buckets of the model's
// exact gradients travel instead (two doubles per value; their sum is exact
// in any order, so every rank count, transport and reduction tree gives the
// same bits), and finish() rounds them into the float gradients.
// Memory: where the group's communicator has shared memory (MPI ranks on one
// node), the gradient buffer moves into it and buckets reduce in place.
#pragma once

#include "backends/comm/communicator.hpp"
#include "backends/context.hpp"
#include "layers/sequential.hpp"
#include "strategies/mixed_precision.hpp"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace strata {

// Gradient compression for the allreduce: buckets converted to 16 bits.
enum class GradCompression { none, bf16, fp16 };
GradCompression parse_grad_compression(const std::string& name);  // throws config
const char* to_string(GradCompression c);

struct GradSyncOptions {
  std::size_t bucket_bytes = std::size_t(25) << 20;  // 0: a single bucket
  bool overlap = true;  // start buckets during backward (else after it)
  GradCompression compression = GradCompression::none;
};

// Throws config for a harmful combination: fp16 compression without loss
// scaling (gradients below fp16's smallest value, 6e-8, would arrive as
// zeros; loss scaling lifts them into its range, as for fp16 training).
void validate(const GradSyncOptions& options, bool loss_scaled);

template <class T>
class GradientSync {
 public:
  // group: the ranks holding replicas of `model` (built).
  GradientSync(Context& ctx, comm::Communicator& group, Sequential<T>& model,
               const GradSyncOptions& options, bool loss_scaled);

  // A new step: nothing launched yet; info.comm_bytes will count the payload.
  void begin(StepInfo& info);
  // Backward hook: layer k's gradients and those of every later layer are
  // written (Sequential::backward's after_layer): launches the buckets they
  // complete (with overlap).
  void layer_done(std::size_t k);
  // Launches the rest and waits: the model's gradients hold the group's sum.
  void finish();

  // Buckets as [first, last) ranges of the flat gradient buffer, in launch order.
  const std::vector<std::pair<std::size_t, std::size_t>>& buckets() const { return buckets_; }
  const GradSyncOptions& options() const { return options_; }

 private:
  void launch(std::size_t b);

  Context& ctx_;
  comm::Communicator& group_;
  Sequential<T>& model_;
  GradSyncOptions options_;
  bool exact_ = false;  // the model's exact gradients travel (--reproducible)
  std::vector<std::pair<std::size_t, std::size_t>> buckets_;
  std::vector<comm::Handle> handles_;
  std::size_t launched_ = 0;
  StepInfo* info_ = nullptr;
  // Host copies of the buckets when the gradients are device memory and the
  // communicator needs host memory.
  bool staged_ = false;
  std::vector<std::vector<T>> staging_;
  Kokkos::View<std::uint16_t*, MemSpace> comp_;  // compressed buckets
  std::vector<std::vector<std::uint16_t>> staging16_;
  std::vector<std::vector<double>> staging_exact_;
};

}  // namespace strata
