// The sharded gradient sum of the ZeRO stages: each rank ends a step with the
// group's sum of its shard of the gradients only (strategies/shard_map.hpp),
// reduce-scattered unit by unit as backward completes each unit (overlapped
// with the rest of backward, like GradientSync's buckets).
//
//   GradientReduceScatter<float> rs(ctx, group, model, options, loss_scaled);
//   rs.begin(info);                                  // each step
//   rs.backward_begins(last);                        // each backward of the step
//   model.set_piece_hooks({{}, [&](std::size_t p) { rs.piece_done(p); }});
//   model.backward(ctx);
//   rs.finish();             // rs.shard_grads(): this rank's summed shard
//
// Two ways to hold the gradients:
//   ZeRO-1  the model keeps one flat gradient buffer, accumulated over the
//           step's micro-batches; the units are reduce-scattered during the
//           last backward. A unit whose size the group does not divide is
//           copied into a padded buffer first (zeros after its values).
//   ZeRO-2  the model is built with gradient units (zero2_grad_units): the
//           units take turns in two buffers, so a rank holds two units of
//           gradients beside its shard. Every backward reduce-scatters each
//           unit as soon as it is complete and adds it into the shard (so
//           micro-batches cost one reduce-scatter each); the buffer is
//           reused once its reduce-scatter has finished. Units whose
//           gradients arrive before their own layers run backward (a tied
//           weight, or a pipeline's tie sum) are pinned in buffers of their
//           own, accumulated over the step and reduce-scattered in finish()
//           (as ZeRO-1 does with them too).
// Compression: a unit travels in bf16 or fp16 and is widened back into the
// shard. Reproducible (a model built with exact sums, always flat): the exact
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

// The tied pieces of a model (per piece, layers/param_pieces.hpp): those
// holding a weight a later layer uses (its gradients arrive before the
// piece's own backward) and the pieces of `cross`, the top-level layers of a
// tie across pipeline stages (StageTies::layers: their gradients are
// complete only after the tie sum).
template <class T>
std::vector<bool> tied_pieces(const Sequential<T>& model, const std::vector<std::size_t>& cross);

// The units of a model's flat buffers over `ranks`: runs of pieces of
// about the gradient bucket's size; every tied piece is a unit alone.
// layer_units (ZeRO-3, whose units' buffers are all a rank holds of the
// parameters beside its shard): of at most the largest untied piece instead
// where that is smaller, so that each buffer holds about one layer (as
// DeepSpeed's ZeRO-3 gathers module by module), not a bucket.
template <class T>
ShardMap shard_units(const Sequential<T>& model, const GradSyncOptions& options, int ranks,
                     const std::vector<bool>& tied, bool layer_units = false);

// ZeRO-2's gradient units for BuildOptions::grad_units (ZeRO-3's parameter
// units too): the units of `map`, taking turns in buffers 0 and 1 in
// backward order, except the tied ones, each pinned in a buffer of its own.
std::vector<BufferUnit> zero2_grad_units(const ShardMap& map, const std::vector<bool>& tied);

// Bytes GradientReduceScatter allocates for `map` (the gradient shard and the
// padded, 16-bit or exact copies the units travel in, ZeRO-2's received
// slices) beside the model's own gradients; units: the model's gradient
// units (empty: ZeRO-1); accumulates: more than one backward per step. And
// the bytes of the model's gradient buffers with those units (padded to the
// group size).
std::size_t reduce_scatter_bytes(const ShardMap& map, const GradSyncOptions& options, bool exact,
                                 const std::vector<BufferUnit>& units, bool accumulates,
                                 std::size_t value_bytes);
std::size_t unit_grad_bytes(const ShardMap& map, const std::vector<BufferUnit>& units,
                            std::size_t value_bytes);

template <class T>
class GradientReduceScatter {
 public:
  // model: built (with gradient units for ZeRO-2: those of
  // zero2_grad_units over this map); its units are runs of pieces of about
  // options.bucket_bytes; accumulates: steps may run more than one backward
  // (micro-batches; ZeRO-2 then receives later ones beside the shard).
  // tied: tied_pieces of the model.
  GradientReduceScatter(Context& ctx, comm::Communicator& group, Sequential<T>& model,
                        const GradSyncOptions& options, bool loss_scaled, bool accumulates,
                        const std::vector<bool>& tied);

  void begin(StepInfo& info);
  // Before each backward of the step; last: the step's last backward.
  void backward_begins(bool last);
  // Backward hook (PieceHooks::done): piece k's gradients and every later
  // piece's are written; launches the units they complete (ZeRO-1: in the
  // last backward) and readies the buffer of piece k - 1's unit (ZeRO-2).
  void piece_done(std::size_t k);
  // Launches the rest and waits: shard_grads() holds the group's sum.
  void finish();

  const ShardMap& map() const { return map_; }
  bool keeps_gradients() const { return flat_; }  // ZeRO-1
  // This rank's summed gradients, in shard order (ShardMap::pieces).
  Vector<T> shard_grads() const { return shard_grads_; }
  // Bytes of the buffers it allocated (reduce_scatter_bytes).
  std::size_t bytes() const { return bytes_; }

 private:
  void launch(std::size_t u);  // ZeRO-1; u: index in map().units()
  // ZeRO-2: unit u's reduce-scatter (adds: into the shard's sum, through tmp_).
  void launch_unit(std::size_t u, bool adds);
  void prepare(std::size_t u);        // its buffer free and zeroed
  void complete(std::size_t buffer);  // waits for the buffer's unit in flight, sums it in
  bool pinned(std::size_t u) const { return held_[u]; }

  Context& ctx_;
  comm::Communicator& group_;
  Sequential<T>& model_;
  GradSyncOptions options_;
  ShardMap map_;
  bool exact_ = false, flat_ = true;
  std::size_t bytes_ = 0;
  VectorBuffer<T> shard_grads_;
  // ZeRO-1: per unit, where its padded copy lies in pad_ (or comp_,
  // exact_pad_) when it needs one.
  std::vector<std::size_t> pad_at_;
  VectorBuffer<T> pad_;
  Kokkos::View<std::uint16_t*, MemSpace> comp_, comp_shard_;
  Kokkos::View<double*, MemSpace> exact_pad_, exact_shard_;
  std::vector<comm::Handle> handles_;
  // ZeRO-2: per gradient buffer, the unit launched from it and not yet
  // complete, its handle, and whether it adds into the shard (later
  // micro-batches: received in tmp_ first).
  struct InFlight {
    std::size_t unit = SIZE_MAX;
    comm::Handle handle;
    bool adds = false;
  };
  std::vector<InFlight> in_flight_;
  std::vector<std::size_t> buffer_at_, tmp_at_;  // each buffer's 16-bit copy, received slice
  VectorBuffer<T> tmp_;
  Kokkos::View<std::uint16_t*, MemSpace> comp_tmp_;
  std::vector<bool> prepared_, held_;  // held: a tied unit, reduce-scattered in finish()
  std::vector<std::size_t> unit_of_piece_;
  std::size_t backwards_ = 0;  // of this step so far
  bool adds_ = false, last_backward_ = true, accumulates_ = false;
  std::size_t next_ = 0;  // units launched, from the last
  StepInfo* info_ = nullptr;
};

}  // namespace strata
