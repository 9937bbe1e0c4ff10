// The sharded gradient sum of the ZeRO stages: each rank ends a step with the
// group's sum of its shard of the gradients only (strategies/shard_map.hpp),
// reduce-scattered unit by unit as backward completes each unit (overlapped
// with the rest of backward, like GradientSync's buckets).
//
//   GradientReduceScatter<float> rs(ctx, group, model, options, loss_scaled);
//   rs.begin(info);                                       // each step
//   model.backward(ctx, [&](std::size_t k) { rs.layer_done(k); });
//   rs.finish();             // rs.shard_grads(): this rank's summed shard
//
// A unit whose size the group does not divide is copied into a padded
// buffer first (zeros after its values), so the padding of every shard sums
// to zero. Compression: the unit travels in bf16 or fp16 and the shard is
// widened back. Reproducible (a model built with exact sums): the exact
// twins of the gradients travel (two doubles per value, a sum exact in any
// order) and the shard is rounded from them, so every group size, transport
// and unit size gives the same bits.
#pragma once

#include "backends/comm/communicator.hpp"
#include "backends/context.hpp"
#include "layers/sequential.hpp"
#include "strategies/gradient_sync.hpp"
#include "strategies/mixed_precision.hpp"
#include "strategies/shard_map.hpp"

#include <cstdint>
#include <vector>

namespace strata {

// The units of a model's flat buffers over `ranks` (the gradient buckets).
template <class T>
ShardMap shard_units(const Sequential<T>& model, const GradSyncOptions& options, int ranks);

// Bytes GradientReduceScatter allocates for `map`: the gradient shard and the
// padded, 16-bit or exact copies the units travel in.
std::size_t reduce_scatter_bytes(const ShardMap& map, const GradSyncOptions& options, bool exact,
                                 std::size_t value_bytes);

template <class T>
class GradientReduceScatter {
 public:
  // model: built; its units are runs of layers of about options.bucket_bytes.
  GradientReduceScatter(Context& ctx, comm::Communicator& group, Sequential<T>& model,
                        const GradSyncOptions& options, bool loss_scaled);

  void begin(StepInfo& info);
  // Backward hook: layer k's gradients and every later layer's are written;
  // launches the units they complete (with overlap).
  void layer_done(std::size_t k);
  // Launches the rest and waits: shard_grads() holds the group's sum.
  void finish();

  const ShardMap& map() const { return map_; }
  // This rank's summed gradients, in shard order (ShardMap::pieces).
  Vector<T> shard_grads() const { return shard_grads_; }
  // Bytes of the buffers it allocated (the shard, padding copies, 16-bit and
  // exact staging).
  std::size_t bytes() const { return bytes_; }

 private:
  void launch(std::size_t u);  // index in map().units()

  Context& ctx_;
  comm::Communicator& group_;
  Sequential<T>& model_;
  GradSyncOptions options_;
  ShardMap map_;
  bool exact_ = false;
  std::size_t bytes_ = 0;
  VectorBuffer<T> shard_grads_;
  // Per unit (flat order): where its padded copy lies in pad_ (or comp_,
  // exact_pad_), when it needs one; the next unit to launch counts down.
  std::vector<std::size_t> pad_at_;
  VectorBuffer<T> pad_;
  Kokkos::View<std::uint16_t*, MemSpace> comp_, comp_shard_;
  Kokkos::View<double*, MemSpace> exact_pad_, exact_shard_;
  std::vector<comm::Handle> handles_;
  std::size_t next_ = 0;  // units launched, from the last
  StepInfo* info_ = nullptr;
};

}  // namespace strata
