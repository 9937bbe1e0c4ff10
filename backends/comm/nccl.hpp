// NCCL communicator (RCCL shares the API): GPU buffers, stream-ordered on the
// rank's CUDA stream (the execution-space instance's stream in a Kokkos CUDA
// build), unique id bootstrapped through any other communicator (MPI ranks or
// thread ranks).
//
// Collectives are enqueued on the stream and then waited for with a deadline
// (cudaStreamQuery polling); on timeout the NCCL communicator is aborted and an
// error names the operation. Pointers must be device memory.
//
// This glue is plain C++ against the CUDA runtime and NCCL, so it compiles and
// links in any build that has a CUDA toolkit with NCCL, even a host-only
// Kokkos build; where there is no CUDA device, create() throws a clear
// "no CUDA device" error.
#pragma once

#include "backends/comm/communicator.hpp"

#include <memory>

namespace strata::comm {

namespace detail {
struct NcclState;
}

class NcclComm final : public Communicator {
 public:
  // Collective over `bootstrap` (every rank calls it): rank 0 makes the NCCL
  // unique id and broadcasts it. device < 0: the node-local rank modulo the
  // number of devices. stream: the CUDA stream to order on (a cudaStream_t);
  // null: a stream of its own.
  static std::unique_ptr<NcclComm> create(Communicator& bootstrap, int device = -1,
                                          void* stream = nullptr);
  ~NcclComm() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "nccl"; }
  bool accepts_device_memory() const override { return true; }
  int device() const;
  void* stream() const;  // cudaStream_t

 protected:
  STRATA_COMM_TRANSPORT_OVERRIDES

 private:
  NcclComm(std::unique_ptr<detail::NcclState> state, int rank, int size, const CommOptions& o);
  // Waits for the stream with the deadline; aborts the communicator and
  // throws on timeout or on an asynchronous NCCL error.
  void wait(const char* what, std::uint64_t seq);

  std::unique_ptr<detail::NcclState> state_;
  int rank_, size_;
  std::uint64_t seq_ = 0;
};

// CUDA glue shared by Strata's GPU parts.
namespace cuda {
// Number of CUDA devices; throws "no CUDA device" (runtime) when there is none
// or the driver cannot be used, with the CUDA runtime's own message.
int device_count();
// Node-local rank from the launcher's environment (Open MPI, MPICH, Slurm),
// or -1 when unknown.
int local_rank_from_environment();
// Selects the device for this process or thread: local_rank modulo the
// device count (device 0 when the local rank is unknown).
int select_device(int local_rank);
}  // namespace cuda

}  // namespace strata::comm
