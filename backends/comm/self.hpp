// The one-rank communicator: in-place collectives do nothing, out-of-place
// ones are copies in any memory (device::copy), and send/recv have no peer.
#pragma once

#include "backends/comm/communicator.hpp"

namespace strata::comm {

class SelfComm final : public Communicator {
 public:
  explicit SelfComm(const CommOptions& options = CommOptions::from_environment())
      : Communicator(options) {}
  ~SelfComm() override { shutdown(); }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "self"; }
  Memory memory(Op, DataType, ReduceOp) const override { return Memory::any; }

 protected:
  void do_allreduce(const void* send, void* recv, std::size_t count, DataType type,
                    ReduceOp) override;
  void do_reduce_scatter(const void* send, void* recv, std::size_t count, DataType type,
                         ReduceOp) override;
  void do_allgather(const void* send, void* recv, std::size_t count, DataType type) override;
  void do_broadcast(void*, std::size_t, DataType, int) override {}
  void do_send(const void*, std::size_t, DataType, int, int) override;
  void do_recv(void*, std::size_t, DataType, int, int) override;
  void do_barrier() override {}
  std::unique_ptr<Communicator> do_split(int color, int key) override;
};

}  // namespace strata::comm
