// A communicator that has a size and nothing else: the planner builds a
// tensor-parallel group's layers (make_tensor_parallel) with it to learn
// their shapes, parameters and FLOP without any other rank. Every
// operation that would move data throws runtime: planning never runs a layer.
#pragma once

#include "backends/comm/communicator.hpp"

namespace strata::planner {

class PlanningComm final : public comm::Communicator {
 public:
  explicit PlanningComm(int size);
  ~PlanningComm() override { shutdown(); }
  int rank() const override { return 0; }
  int size() const override { return size_; }
  std::string name() const override { return "planning"; }
  comm::Memory memory(comm::Op, comm::DataType, comm::ReduceOp) const override {
    return comm::Memory::any;
  }

 protected:
  void do_allreduce(const void*, void*, std::size_t, comm::DataType, comm::ReduceOp) override;
  void do_reduce_scatter(const void*, void*, std::size_t, comm::DataType, comm::ReduceOp) override;
  void do_allgather(const void*, void*, std::size_t, comm::DataType) override;
  void do_broadcast(void*, std::size_t, comm::DataType, int) override;
  void do_send(const void*, std::size_t, comm::DataType, int, int) override;
  void do_recv(void*, std::size_t, comm::DataType, int, int) override;
  void do_barrier() override;
  std::unique_ptr<comm::Communicator> do_split(int, int) override;

 private:
  int size_;
};

}  // namespace strata::planner
