// The sequence shards of a tensor-parallel group (sequence parallelism,
// strategies/sequence_parallel.hpp): which positions a rank holds, the
// collectives that move between a shard and the whole sequence, and the
// scratch they share.
#pragma once

#include "backends/comm/communicator.hpp"
#include "backends/context.hpp"
#include "layers/layer.hpp"

#include <string>

namespace strata {

// The sequence shards of one tensor-parallel group, and the scratch their
// collectives share (one per rank: layers use it one at a time).
class SequenceShards {
 public:
  explicit SequenceShards(comm::Communicator& tp);

  comm::Communicator& comm() const { return tp_; }
  std::size_t ranks() const { return static_cast<std::size_t>(tp_.size()); }
  std::size_t rank() const { return static_cast<std::size_t>(tp_.rank()); }
  // {T / tp, ...} of a whole shape {T, ...}; throws config, naming `layer`,
  // when it has no positions or tp does not divide them.
  Shape shard(const Shape& whole, const std::string& layer) const;
  Shape whole(const Shape& shard) const;

  // The scratch: regions of `bytes` each (grown, never shrunk; called at
  // reserve time, before the first step).
  static constexpr std::size_t regions = 3;
  void reserve(std::size_t bytes);
  // Region k (1 or 2: region 0 is the collectives' own) as `count` values.
  template <class E>
  E* region(std::size_t k, std::size_t count) const;

  // whole (rows, tp w) = every rank's shard (rows, w), in position order.
  template <class E>
  void gather(Context& ctx, const E* shard, E* whole, std::size_t rows, std::size_t w);
  // shard (rows, w) = this rank's part of the sum over the group of whole
  // (rows, tp w).
  template <class E>
  void reduce_scatter(Context& ctx, const E* whole, E* shard, std::size_t rows, std::size_t w);
  // shard (rows, w) = this rank's part of whole (rows, tp w), no communication.
  template <class E>
  void slice(Context& ctx, const E* whole, E* shard, std::size_t rows, std::size_t w) const;

 private:
  comm::Communicator& tp_;
  std::size_t bytes_ = 0;  // per region
  Kokkos::View<double*, MemSpace> scratch_;
};

// Layers that use the shared scratch: the bytes they need of each region for
// a micro-batch of max_batch samples (stage_memory counts the largest once).
class SequenceScratchUser {
 public:
  virtual ~SequenceScratchUser() = default;
  // exact: under --reproducible (exact pairs travel: 16 bytes a value).
  virtual std::size_t sequence_scratch(std::size_t max_batch, bool exact) const = 0;
};

// The scratch a model's layers share on one rank: the largest need of any of
// them, times the regions.
template <class T>
std::size_t sequence_scratch_bytes(const Layer<T>& layer, std::size_t max_batch, bool exact);

// The gradient of parameters used on a shard of the sequence: a backward
// adds this rank's contribution into local(), then the group's sum of it
// into the layer's gradient (exactly under --reproducible).
template <class T>
class SequenceSummedGrads {
 public:
  // grads: the layer's slice of the model's gradient buffer.
  void bind(Vector<T> grads);
  Vector<T> local() const { return local_; }
  template <class F>
  void run(Context& ctx, comm::Communicator& tp, const F& body) {
    begin(ctx);
    body();
    end(ctx, tp);
  }

 private:
  void begin(Context& ctx);
  void end(Context& ctx, comm::Communicator& tp);

  Vector<T> grads_, local_;
  VectorBuffer<T> owner_;
  Kokkos::View<double*, MemSpace> exact_;  // local()'s exact twin under --reproducible
  ExactGradients exact_view_;
  const ExactGradients* outer_ = nullptr;
};

}  // namespace strata
