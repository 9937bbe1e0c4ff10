#include "backends/comm/nccl.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdlib>
#include <thread>

namespace strata::comm {

namespace cuda {
namespace {
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    STRATA_THROW(runtime, "CUDA: ", what, " failed: ", cudaGetErrorString(e));
}
}  // namespace

int device_count() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0)
    STRATA_THROW(runtime, "no CUDA device: ",
                 e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports 0 devices",
                 " (NCCL and cuBLAS need a GPU; use the threads or mpi communicator on CPUs)");
  return n;
}

int local_rank_from_environment() {
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID",
                        "MV2_COMM_WORLD_LOCAL_RANK", "PMI_LOCAL_RANK"})
    if (const char* s = std::getenv(v)) return std::atoi(s);
  return -1;
}

int select_device(int local_rank) {
  const int n = device_count();
  const int device = local_rank < 0 ? 0 : local_rank % n;
  check(cudaSetDevice(device), "cudaSetDevice");
  return device;
}
}  // namespace cuda

namespace detail {
struct NcclState {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  bool own_stream = false;
  int device = 0;
  int* scratch = nullptr;  // one int on the device, for barrier()
};
}  // namespace detail

namespace {

void check_nccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) STRATA_THROW(runtime, "NCCL: ", what, " failed: ", ncclGetErrorString(r));
}

ncclDataType_t nccl_type(DataType t) {
  switch (t) {
    case DataType::f32: return ncclFloat32;
    case DataType::f64: return ncclFloat64;
    case DataType::i32: return ncclInt32;
    case DataType::i64: return ncclInt64;
    // NCCL reduces 16-bit data in its own kernels (rounding per step), not
    // in float with one rounding as the host transports do.
    case DataType::f16: return ncclFloat16;
    case DataType::bf16:
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 21000
      return ncclBfloat16;
#else
      STRATA_THROW(config, "NCCL: bfloat16 needs NCCL 2.10 or newer");
#endif
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::average: return ncclAvg;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
  }
  return ncclSum;
}

}  // namespace

NcclComm::NcclComm(std::unique_ptr<detail::NcclState> state, int rank, int size,
                   const CommOptions& o)
    : Communicator(o), state_(std::move(state)), rank_(rank), size_(size) {}

std::unique_ptr<NcclComm> NcclComm::create(Communicator& bootstrap, int device, void* stream) {
  // Every rank learns whether all have a device before any waits in NCCL.
  int ok = 1, device_id = 0;
  std::string error;
  try {
    if (device >= 0) {
      cuda::device_count();
      cuda::check(cudaSetDevice(device), "cudaSetDevice");
      device_id = device;
    } else {
      device_id = cuda::select_device(cuda::local_rank_from_environment());
    }
  } catch (const Error& e) {
    ok = 0;
    error = e.message();
  }
  bootstrap.allreduce(&ok, &ok, 1, DataType::i32, ReduceOp::min);
  if (!ok)
    STRATA_THROW(runtime, "NCCL communicator on rank ", bootstrap.rank(), ": ",
                 error.empty() ? "another rank has no usable CUDA device" : error);
  ncclUniqueId id;
  if (bootstrap.rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  static_assert(sizeof(id) % 8 == 0, "NCCL unique id size");
  bootstrap.broadcast(&id, sizeof(id) / 8, DataType::i64, 0);
  auto state = std::make_unique<detail::NcclState>();
  state->device = device_id;
  if (stream != nullptr) {
    state->stream = static_cast<cudaStream_t>(stream);
  } else {
    cuda::check(cudaStreamCreateWithFlags(&state->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    state->own_stream = true;
  }
  cuda::check(cudaMalloc(reinterpret_cast<void**>(&state->scratch), sizeof(int)), "cudaMalloc");
  check_nccl(ncclCommInitRank(&state->comm, bootstrap.size(), id, bootstrap.rank()),
             "ncclCommInitRank");
  return std::unique_ptr<NcclComm>(
      new NcclComm(std::move(state), bootstrap.rank(), bootstrap.size(), bootstrap.options()));
}

NcclComm::~NcclComm() {
  shutdown();
  if (!state_) return;
  if (state_->comm) ncclCommDestroy(state_->comm);
  if (state_->scratch) cudaFree(state_->scratch);
  if (state_->own_stream) cudaStreamDestroy(state_->stream);
}

int NcclComm::device() const { return state_->device; }
void* NcclComm::stream() const { return state_->stream; }

void NcclComm::wait(const char* what, std::uint64_t seq) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(options_.timeout_s));
  for (;;) {
    const cudaError_t e = cudaStreamQuery(state_->stream);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) cuda::check(e, what);
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(state_->comm, &async);
    if (async != ncclSuccess) {
      ncclCommAbort(state_->comm);
      state_->comm = nullptr;
      STRATA_THROW(runtime, "nccl communicator: ", what, " #", seq, " on rank ", rank_, " of ",
                   size_, " failed: ", ncclGetErrorString(async));
    }
    if (Clock::now() >= deadline) {
      ncclCommAbort(state_->comm);
      state_->comm = nullptr;
      STRATA_THROW(runtime, "nccl communicator: ", what, " #", seq, " on rank ", rank_, " of ",
                   size_, " timed out after ", options_.timeout_s,
                   " s (a rank did not arrive; STRATA_COMM_TIMEOUT sets the limit)");
    }
    if (std::chrono::duration<double>(Clock::now() - start).count() > 50e-6)
      std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

void NcclComm::do_allreduce(const void* send, void* recv, std::size_t count, DataType type,
                            ReduceOp op) {
  check_nccl(ncclAllReduce(send, recv, count, nccl_type(type), nccl_op(op), state_->comm,
                           state_->stream),
             "ncclAllReduce");
  wait("allreduce", seq_++);
}

void NcclComm::do_reduce_scatter(const void* send, void* recv, std::size_t count, DataType type,
                                 ReduceOp op) {
  check_nccl(ncclReduceScatter(send, recv, count, nccl_type(type), nccl_op(op), state_->comm,
                               state_->stream),
             "ncclReduceScatter");
  wait("reduce_scatter", seq_++);
}

void NcclComm::do_allgather(const void* send, void* recv, std::size_t count, DataType type) {
  check_nccl(ncclAllGather(send, recv, count, nccl_type(type), state_->comm, state_->stream),
             "ncclAllGather");
  wait("allgather", seq_++);
}

void NcclComm::do_broadcast(void* buf, std::size_t count, DataType type, int root) {
  check_nccl(ncclBroadcast(buf, buf, count, nccl_type(type), root, state_->comm, state_->stream),
             "ncclBroadcast");
  wait("broadcast", seq_++);
}

void NcclComm::do_send(const void* buf, std::size_t count, DataType type, int dest, int) {
  // NCCL matches point-to-point operations by order per peer; tags are not
  // part of its API.
  check_nccl(ncclSend(buf, count, nccl_type(type), dest, state_->comm, state_->stream), "ncclSend");
  wait("send", seq_++);
}

void NcclComm::do_recv(void* buf, std::size_t count, DataType type, int source, int) {
  check_nccl(ncclRecv(buf, count, nccl_type(type), source, state_->comm, state_->stream),
             "ncclRecv");
  wait("recv", seq_++);
}

void NcclComm::do_barrier() {
  check_nccl(ncclAllReduce(state_->scratch, state_->scratch, 1, ncclInt32, ncclSum, state_->comm,
                           state_->stream),
             "ncclAllReduce (barrier)");
  wait("barrier", seq_++);
}

std::unique_ptr<Communicator> NcclComm::do_split(int color, int key) {
#if NCCL_VERSION_CODE >= 21800
  ncclComm_t out = nullptr;
  check_nccl(ncclCommSplit(state_->comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &out, nullptr),
             "ncclCommSplit");
  if (out == nullptr) return nullptr;
  auto state = std::make_unique<detail::NcclState>();
  state->comm = out;
  state->device = state_->device;
  cuda::check(cudaStreamCreateWithFlags(&state->stream, cudaStreamNonBlocking), "cudaStreamCreate");
  state->own_stream = true;
  cuda::check(cudaMalloc(reinterpret_cast<void**>(&state->scratch), sizeof(int)), "cudaMalloc");
  int rank = 0, size = 0;
  ncclCommUserRank(out, &rank);
  ncclCommCount(out, &size);
  return std::unique_ptr<NcclComm>(new NcclComm(std::move(state), rank, size, options_));
#else
  (void)color;
  (void)key;
  STRATA_THROW(config, "nccl communicator: split needs NCCL 2.18 or newer (this is ",
               NCCL_MAJOR, ".", NCCL_MINOR, ")");
#endif
}

}  // namespace strata::comm
