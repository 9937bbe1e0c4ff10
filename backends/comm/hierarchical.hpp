// Hierarchical communicator: several thread ranks in each of several
// processes (Horovod's hierarchical allreduce). A collective runs inside the
// process first (shared memory), then across processes between the local
// rank 0s only, then is broadcast back inside the process.
//
// Global rank = process * local_size + local_rank; every process must have the
// same number of thread ranks. Point-to-point and split are available only
// between thread ranks of the same process (use the flat MPI communicator
// with one rank per process otherwise).
#pragma once

#include "backends/comm/communicator.hpp"

#include <vector>

namespace strata::comm {

class HierarchicalComm final : public Communicator {
 public:
  // local: this process's thread ranks; inter: the processes' communicator,
  // used only by local rank 0 (may be null elsewhere). Both are borrowed and
  // must outlive this object. Collective over all thread ranks of all
  // processes: checks that every process has the same number of thread ranks.
  HierarchicalComm(Communicator& local, Communicator* inter);
  ~HierarchicalComm() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "hierarchical"; }

 protected:
  STRATA_COMM_TRANSPORT_OVERRIDES

 private:
  int local_peer(int global, const char* what) const;

  Communicator& local_;
  Communicator* inter_;
  int process_ = 0, processes_ = 1, rank_ = 0, size_ = 1;
  std::vector<unsigned char> work_;
};

}  // namespace strata::comm
