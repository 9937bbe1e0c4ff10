// The data-parallel ranks that together hold one batch, as a layer sees them:
// SyncBatchNorm (layers/batchnorm.hpp) sums its per-channel statistics over
// them. Layers know nothing of communicators; a strategy that splits the
// batch (strategies/data_parallel.hpp) gives the model a BatchGroup backed by
// its communicator (Sequential::set_batch_group).
//
//   group.sum(ctx, partial);   // in place: every rank gets the sum over ranks
//
// Every rank of the group must call sum() the same number of times in the
// same order (it is a collective), including ranks whose shard is empty.
#pragma once

#include "backends/context.hpp"
#include "backends/kokkos.hpp"

namespace strata {

template <class T>
class BatchGroup {
 public:
  virtual ~BatchGroup() = default;
  virtual int size() const = 0;
  // values = the sum of every rank's values (after the kernels of ctx that
  // wrote them have finished).
  virtual void sum(Context& ctx, Vector<T> values) = 0;
  // The same for doubles: the statistics, accumulated in double
  // (backends/segment_sums.hpp), and --reproducible's exact sums
  // (backends/exact_sum.hpp: hi, lo pairs, which add exactly in any order).
  virtual void sum_doubles(Context& ctx, Kokkos::View<double*, MemSpace> values) = 0;
};

}  // namespace strata
