// NCCL communicator (RCCL on HIP builds: same API): GPU buffers,
// stream-ordered on the rank's stream (the execution-space instance's
// cudaStream_t or hipStream_t in a Kokkos GPU build), unique id bootstrapped
// through any other communicator (MPI ranks or thread ranks).
//
// Collectives are enqueued on the stream and then waited for with a deadline
// (polling the stream); on timeout the NCCL communicator is aborted and an
// error names the operation. Pointers must be device memory.
//
// Sends are copied into device buffers of the communicator and held until
// the next receive, collective or flush(); they then run in one NCCL group
// (ncclGroupStart/End) with that receive, so that a ring of sends before
// receives and a pipeline's exchanges progress instead of waiting for each
// other. Without a stream of the caller's, every operation first waits for
// the device (the data's producer may be on any stream).
//
// This glue is plain C++ against NCCL and the GPU runtime
// (backends/comm/nccl_runtime.hpp: CUDA's, or HIP's with RCCL), so the CUDA
// flavour compiles and links in any build that has a CUDA toolkit with NCCL,
// even a host-only Kokkos build; where there is no device, create() throws a
// clear "no CUDA device" ("no HIP device") error.
#pragma once

#include "backends/comm/communicator.hpp"
#include "backends/comm/nccl_runtime.hpp"
#include "backends/comm/registry.hpp"

#include <memory>

namespace strata::comm {

namespace detail {
struct NcclState;
}

class NcclComm final : public Communicator {
 public:
  // Collective over `bootstrap` (every rank calls it): rank 0 makes the NCCL
  // unique id and broadcasts it. device < 0: the calling thread's current
  // device (the one Kokkos runs on in a GPU build; Runtime chose it from
  // --device or the node-local rank); device >= 0: that device (thread ranks
  // of a test, one GPU each). stream: the stream to order on (a cudaStream_t
  // or hipStream_t); null: a stream of its own.
  static std::unique_ptr<NcclComm> create(Communicator& bootstrap, int device = -1,
                                          void* stream = nullptr);
  ~NcclComm() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "nccl"; }
  Memory memory(Op, DataType, ReduceOp) const override { return Memory::device; }
  int device() const;
  void* stream() const;  // cudaStream_t or hipStream_t

 protected:
  STRATA_COMM_TRANSPORT_OVERRIDES

 private:
  NcclComm(std::unique_ptr<detail::NcclState> state, int rank, int size, const CommOptions& o);
  // Waits for the stream with the deadline; aborts the communicator and
  // throws on timeout or on an asynchronous NCCL error. Returns the send
  // buffers of finished groups to the pool.
  void wait(const char* what, std::uint64_t seq);
  // Waits for the device when the stream is the communicator's own.
  void order_after_producers();
  // Enqueues the held-back sends (in the open group when there is one).
  void enqueue_sends();
  void do_flush() override;

  std::unique_ptr<detail::NcclState> state_;
  int rank_, size_;
  std::uint64_t seq_ = 0;
};

// The device backend a program hands to use_device_backend
// (backends/comm/registry.hpp): "nccl", created over a bootstrap
// communicator on the current device.
const DeviceBackend& nccl_backend();

// The GPU runtime's glue (gpu::device_count() and the rest) under the name
// it had before HIP builds had it.
namespace cuda = gpu;

}  // namespace strata::comm
