// MPI communicator (processes and nodes; ranks from mpirun or srun).
//
// Host buffers go to MPI directly; device buffers are staged through the host
// by the front doors (Communicator::memory) unless the MPI library is
// CUDA-aware (detected through Open MPI's MPIX_Query_cuda_support, or forced
// with STRATA_MPI_CUDA_AWARE=1) and the operation never touches its buffers
// on the host: 16-bit sums, averages (divided on the host), reduce_scatter
// (moved in place on the host) and sends (copied to a buffer) are staged
// even then.
// Collectives are MPI's blocking calls (its fastest path) watched by a
// watchdog thread: one that exceeds the timeout is reported (operation,
// sequence number, rank) and the job is aborted, instead of hanging. recv
// polls with a deadline and throws.
// With STRATA_COMM_CHECK=1 every collective first exchanges a descriptor
// through rank 0, which names the first mismatch or the ranks that did not
// arrive.
#pragma once

#include "backends/comm/communicator.hpp"

#include <mpi.h>

#include <deque>
#include <vector>

namespace strata::comm {

class MpiComm final : public Communicator {
 public:
  // Wraps `comm`; frees it on destruction when `owned`.
  MpiComm(MPI_Comm comm, bool owned, const CommOptions& options = CommOptions::from_environment());
  ~MpiComm() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "mpi"; }
  Memory memory(Op op, DataType type, ReduceOp reduce) const override;
  void* allocate_shared(std::size_t bytes) override;
  MPI_Comm native() const { return comm_; }

 protected:
  STRATA_COMM_TRANSPORT_OVERRIDES

 private:
  // Completes `request`, polling with backoff until the deadline.
  void complete(MPI_Request& request, const char* what, std::uint64_t seq);
  // STRATA_COMM_CHECK: verifies that every rank calls the same collective.
  void check(const char* what, std::uint64_t seq, std::size_t count, DataType type, int op,
             int root);

  // Sends are buffered: send() copies the data and returns without waiting
  // for the matching recv (the same contract as thread ranks); the copies
  // are freed once MPI is done with them.
  struct PendingSend {
    std::vector<unsigned char> data;
    MPI_Request request;
  };
  void reap_sends(bool wait);
  std::deque<PendingSend> pending_sends_;

  // Shared-memory windows of allocate_shared (ranks on one node; with
  // several nodes, every node must have the same number of ranks).
  struct Window {
    MPI_Win win = MPI_WIN_NULL;
    std::size_t bytes = 0;
    std::vector<unsigned char*> base;  // every local rank's segment
  };
  // The window holding [p, p + bytes) of this rank's segment, or nullptr.
  const Window* window_of(const void* p, std::size_t bytes) const;
  void shared_allreduce(const Window& w, void* buf, std::size_t count, DataType type,
                        ReduceOp op, std::uint64_t seq);
  bool shm_setup_ = false, shm_ok_ = false;
  MPI_Comm node_comm_ = MPI_COMM_NULL;   // ranks on this node
  MPI_Comm cross_comm_ = MPI_COMM_NULL;  // same local rank on every node
  int node_rank_ = 0, node_size_ = 1, nodes_ = 1;
  std::vector<Window> windows_;
  // 16-bit types (bf16, f16): MPI has no 16-bit float sum, and a
  // user-defined MPI_Op would round after every pairwise step. blocks holds
  // size() blocks of `block` elements; an all-to-all brings block r of every
  // rank to rank r, which reduces them in float in rank order and rounds once
  // into mine. allreduce adds an allgather of the results: the bytes of a
  // ring allreduce of 16-bit data and the result thread ranks compute.
  void reduce_16bit(const void* blocks, void* mine, std::size_t block, DataType type, ReduceOp op,
                    std::uint64_t seq);
  std::vector<std::uint16_t> work16_, pad16_, mine16_;
  std::vector<int> counts_;  // MPI_Reduce_scatter's receive counts (all equal)

  MPI_Comm comm_;
  MPI_Comm check_comm_ = MPI_COMM_NULL;  // private channel for descriptor exchange
  bool owned_;
  int rank_ = 0, size_ = 1;
  bool cuda_aware_ = false;
  std::uint64_t seq_ = 0;
};

// MPI's process-wide state. initialize() is called by strata::Runtime when the
// process was launched by mpirun/srun (or when forced), requesting
// MPI_THREAD_MULTIPLE for asynchronous progress.
namespace mpi {
bool launched_by_mpi();  // environment of mpirun (Open MPI, MPICH) or srun (PMI/PMIx)
void initialize(int& argc, char**& argv);
void finalize();
bool initialized();      // by Strata or by the application
int thread_level();      // provided level
bool cuda_aware();       // library reports CUDA support
}  // namespace mpi

}  // namespace strata::comm
