#include "backends/comm/hierarchical.hpp"

#include "backends/comm/reduce.hpp"

#include <cstring>

namespace strata::comm {

HierarchicalComm::HierarchicalComm(Communicator& local, Communicator* inter)
    : Communicator(local.options()), local_(local), inter_(inter) {
  const bool leader = local.rank() == 0;
  STRATA_REQUIRE(!leader || inter != nullptr, config,
                 "hierarchical communicator: local rank 0 needs the inter-process communicator");
  // Local rank 0 learns the process layout and checks that it is regular.
  std::int64_t layout[3] = {0, 1, 1};  // process, processes, consistent local size
  if (leader) {
    layout[0] = inter->rank();
    layout[1] = inter->size();
    const std::int64_t l = local.size();
    const auto lo = inter->allreduce_value(l, ReduceOp::min);
    const auto hi = inter->allreduce_value(l, ReduceOp::max);
    layout[2] = lo == hi ? 1 : 0;
  }
  local.broadcast(layout, 3, DataType::i64, 0);
  STRATA_REQUIRE(layout[2] == 1, config,
                 "hierarchical communicator: every process needs the same number of thread "
                 "ranks (--ranks)");
  process_ = static_cast<int>(layout[0]);
  processes_ = static_cast<int>(layout[1]);
  rank_ = process_ * local.size() + local.rank();
  size_ = processes_ * local.size();
}

HierarchicalComm::~HierarchicalComm() { shutdown(); }

void HierarchicalComm::do_allreduce(const void* send, void* recv, std::size_t count,
                                    DataType type, ReduceOp op) {
  const ReduceOp step = op == ReduceOp::average ? ReduceOp::sum : op;
  local_.allreduce(send, recv, count, type, step);
  if (local_.rank() == 0) inter_->allreduce(recv, recv, count, type, step);
  local_.broadcast(recv, count, type, 0);
  if (op == ReduceOp::average) detail::finish_average(type, recv, count, size_);
}

void HierarchicalComm::do_reduce_scatter(const void* send, void* recv, std::size_t count,
                                         DataType type, ReduceOp op) {
  const std::size_t bytes = count * size_of(type);
  work_.resize(bytes * size_);
  do_allreduce(send, work_.data(), count * size_, type, op);
  if (bytes > 0) std::memcpy(recv, work_.data() + rank_ * bytes, bytes);
}

void HierarchicalComm::do_allgather(const void* send, void* recv, std::size_t count,
                                    DataType type) {
  const std::size_t bytes = count * size_of(type), block = bytes * local_.size();
  unsigned char* mine = static_cast<unsigned char*>(recv) + process_ * block;
  local_.allgather(send, mine, count, type);
  if (local_.rank() == 0) inter_->allgather(mine, recv, count * local_.size(), type);
  local_.broadcast(recv, count * size_, type, 0);
}

void HierarchicalComm::do_broadcast(void* buf, std::size_t count, DataType type, int root) {
  const int root_process = root / local_.size(), root_local = root % local_.size();
  if (process_ == root_process) local_.broadcast(buf, count, type, root_local);
  if (local_.rank() == 0) inter_->broadcast(buf, count, type, root_process);
  local_.broadcast(buf, count, type, 0);
}

void HierarchicalComm::do_barrier() {
  local_.barrier();
  if (local_.rank() == 0) inter_->barrier();
  local_.barrier();
}

int HierarchicalComm::local_peer(int global, const char* what) const {
  STRATA_REQUIRE(global / local_.size() == process_, config, "hierarchical communicator: ", what,
                 " rank ", global, " is in another process; point-to-point works between thread "
                 "ranks of one process only");
  return global % local_.size();
}

void HierarchicalComm::do_send(const void* buf, std::size_t count, DataType type, int dest,
                               int tag) {
  local_.send(buf, count, type, local_peer(dest, "send to"), tag);
}

void HierarchicalComm::do_recv(void* buf, std::size_t count, DataType type, int source,
                               int tag) {
  local_.recv(buf, count, type, local_peer(source, "receive from"), tag);
}

std::unique_ptr<Communicator> HierarchicalComm::do_split(int, int) {
  STRATA_THROW(config, "hierarchical communicator: split is not available; build meshes on the "
                       "thread-rank or MPI communicator");
}

}  // namespace strata::comm
