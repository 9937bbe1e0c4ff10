// A BatchGroup (layers/batch_group.hpp) over a communicator: the sums that
// SyncBatchNorm needs, as in-place allreduces on the data-parallel ranks.
#pragma once

#include "backends/comm/communicator.hpp"
#include "layers/batch_group.hpp"

namespace strata {

template <class T>
class CommBatchGroup final : public BatchGroup<T> {
 public:
  explicit CommBatchGroup(comm::Communicator& comm) : comm_(comm) {}
  int size() const override { return comm_.size(); }
  void sum(Context& ctx, Vector<T> values) override {
    ctx.exec.fence();  // the kernels that wrote the values
    comm_.allreduce(values, comm::ReduceOp::sum);
  }
  void sum_doubles(Context& ctx, Kokkos::View<double*, MemSpace> values) override {
    ctx.exec.fence();
    comm_.allreduce(values, comm::ReduceOp::sum);
  }

 private:
  comm::Communicator& comm_;
};

}  // namespace strata
