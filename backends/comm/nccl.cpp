#include "backends/comm/nccl.hpp"

// RCCL installs rccl/rccl.h (ROCm 5.2 on; plain rccl.h before). Its stream
// parameters are hipStream_t where NCCL's are cudaStream_t.
#if STRATA_NCCL_RCCL
#if __has_include(<rccl/rccl.h>)
#include <rccl/rccl.h>
#else
#include <rccl.h>
#endif
#else
#include <nccl.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

namespace strata::comm {

namespace detail {
// A device buffer for a held-back send.
struct SendBuffer {
  void* p = nullptr;
  std::size_t bytes = 0;
};
struct PendingSend {
  SendBuffer buffer;
  std::size_t count;
  DataType type;
  int dest;
};

struct NcclState {
  ncclComm_t comm = nullptr;
  gpu::Stream stream = nullptr;
  bool own_stream = false;  // created here (and destroyed with the state)
  bool foreign_stream = false;  // a stream of the caller's: kernels order on it
  int device = 0;
  int* scratch = nullptr;  // one int on the device, for barrier()
  std::vector<PendingSend> pending;  // held-back sends, in issue order
  std::vector<SendBuffer> in_flight;  // enqueued, not yet waited for
  std::vector<SendBuffer> pool;       // free send buffers
  // Splitting without ncclCommSplit (NCCL < 2.18): a new communicator
  // bootstrapped over the split of the bootstrap communicator.
  Communicator* bootstrap = nullptr;
  std::unique_ptr<Communicator> owned_bootstrap;

  SendBuffer acquire(std::size_t bytes) {
    for (std::size_t i = 0; i < pool.size(); ++i)
      if (pool[i].bytes >= bytes) {
        SendBuffer b = pool[i];
        pool.erase(pool.begin() + static_cast<std::ptrdiff_t>(i));
        return b;
      }
    SendBuffer b;
    b.bytes = std::max<std::size_t>(bytes, 256);
    b.p = gpu::allocate(b.bytes);
    return b;
  }
  ~NcclState() {
    for (auto& p : pending) gpu::release(p.buffer.p);
    for (auto& b : in_flight) gpu::release(b.p);
    for (auto& b : pool) gpu::release(b.p);
  }
};
}  // namespace detail

namespace {

// The stream as NCCL's functions take it.
#if STRATA_NCCL_RCCL
hipStream_t on(gpu::Stream s) { return static_cast<hipStream_t>(s); }
#else
cudaStream_t on(gpu::Stream s) { return static_cast<cudaStream_t>(s); }
#endif

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
    case ReduceOp::average:
#if NCCL_VERSION_CODE >= 21000
      return ncclAvg;
#else
      STRATA_THROW(config, "nccl communicator: average needs NCCL 2.10 or newer (this is ",
                   NCCL_MAJOR, ".", NCCL_MINOR, "); reduce with sum and scale");
#endif
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
    gpu::device_count();
    if (device >= 0) gpu::set_device(device);
    device_id = gpu::current_device();
  } catch (const Error& e) {
    ok = 0;
    error = e.message();
  }
  bootstrap.allreduce(&ok, &ok, 1, DataType::i32, ReduceOp::min);
  if (!ok && error.empty())
    error = std::string("another rank has no usable ") + gpu::name() + " device";
  STRATA_REQUIRE(ok, runtime, "NCCL communicator on rank ", bootstrap.rank(), ": ", error);
  ncclUniqueId id;
  if (bootstrap.rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  static_assert(sizeof(id) % 8 == 0, "NCCL unique id size");
  bootstrap.broadcast(&id, sizeof(id) / 8, DataType::i64, 0);
  auto state = std::make_unique<detail::NcclState>();
  state->device = device_id;
  state->bootstrap = &bootstrap;
  if (stream != nullptr) {
    state->stream = stream;
    state->foreign_stream = true;
  } else {
    state->stream = gpu::create_stream();
    state->own_stream = true;
  }
  state->scratch = static_cast<int*>(gpu::allocate(sizeof(int)));
  check_nccl(ncclCommInitRank(&state->comm, bootstrap.size(), id, bootstrap.rank()),
             "ncclCommInitRank");
  return std::unique_ptr<NcclComm>(
      new NcclComm(std::move(state), bootstrap.rank(), bootstrap.size(), bootstrap.options()));
}

const DeviceBackend& nccl_backend() {
  static const DeviceBackend backend{
      "nccl",
      [](Communicator& bootstrap, void* stream) -> std::unique_ptr<Communicator> {
        return NcclComm::create(bootstrap, -1, stream);
      },
  };
  return backend;
}

NcclComm::~NcclComm() {
  shutdown();
  if (!state_) return;
  // Sends still held back are dropped (their receivers time out): a rank
  // flushes before it ends, and an error on the way out must not wait.
  if (state_->comm) ncclCommDestroy(state_->comm);
  if (state_->scratch) gpu::release(state_->scratch);
  if (state_->own_stream) gpu::destroy_stream(state_->stream);
}

int NcclComm::device() const { return state_->device; }
void* NcclComm::stream() const { return state_->stream; }

void NcclComm::wait(const char* what, std::uint64_t seq) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(options_.timeout_s));
  for (;;) {
    if (gpu::finished(state_->stream, what)) {
      for (auto& b : state_->in_flight) state_->pool.push_back(b);
      state_->in_flight.clear();
      return;
    }
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
  order_after_producers();
  enqueue_sends();
  check_nccl(ncclAllReduce(send, recv, count, nccl_type(type), nccl_op(op), state_->comm,
                           on(state_->stream)),
             "ncclAllReduce");
  wait("allreduce", seq_++);
}

void NcclComm::do_reduce_scatter(const void* send, void* recv, std::size_t count, DataType type,
                                 ReduceOp op) {
  order_after_producers();
  enqueue_sends();
  check_nccl(ncclReduceScatter(send, recv, count, nccl_type(type), nccl_op(op), state_->comm,
                               on(state_->stream)),
             "ncclReduceScatter");
  wait("reduce_scatter", seq_++);
}

void NcclComm::do_allgather(const void* send, void* recv, std::size_t count, DataType type) {
  order_after_producers();
  enqueue_sends();
  check_nccl(ncclAllGather(send, recv, count, nccl_type(type), state_->comm, on(state_->stream)),
             "ncclAllGather");
  wait("allgather", seq_++);
}

void NcclComm::do_broadcast(void* buf, std::size_t count, DataType type, int root) {
  order_after_producers();
  enqueue_sends();
  check_nccl(
      ncclBroadcast(buf, buf, count, nccl_type(type), root, state_->comm, on(state_->stream)),
      "ncclBroadcast");
  wait("broadcast", seq_++);
}

void NcclComm::order_after_producers() {
  // A stream of the caller's orders after its kernels by itself.
  if (!state_->foreign_stream) gpu::synchronize_device();
}

void NcclComm::enqueue_sends() {
  for (auto& p : state_->pending) {
    check_nccl(ncclSend(p.buffer.p, p.count, nccl_type(p.type), p.dest, state_->comm,
                        on(state_->stream)),
               "ncclSend");
    state_->in_flight.push_back(p.buffer);
  }
  state_->pending.clear();
}

void NcclComm::do_send(const void* buf, std::size_t count, DataType type, int dest, int) {
  // NCCL matches point-to-point operations by order per peer; tags are not
  // part of its API. The copy makes buf reusable at once, as with the other
  // transports; the send itself waits for the next receive, collective or
  // flush (see the header).
  order_after_producers();
  const std::size_t bytes = count * size_of(type);
  detail::PendingSend p{state_->acquire(bytes), count, type, dest};
  if (bytes > 0)
    gpu::copy_on(state_->stream, p.buffer.p, buf, bytes);
  state_->pending.push_back(p);
  if (!state_->foreign_stream) gpu::synchronize(state_->stream);
  ++seq_;
}

void NcclComm::do_recv(void* buf, std::size_t count, DataType type, int source, int) {
  order_after_producers();
  check_nccl(ncclGroupStart(), "ncclGroupStart");
  try {
    enqueue_sends();
    check_nccl(ncclRecv(buf, count, nccl_type(type), source, state_->comm, on(state_->stream)),
               "ncclRecv");
  } catch (...) {
    ncclGroupEnd();
    throw;
  }
  check_nccl(ncclGroupEnd(), "ncclGroupEnd");
  wait("recv", seq_++);
}

void NcclComm::do_flush() {
  if (state_->pending.empty()) return;
  check_nccl(ncclGroupStart(), "ncclGroupStart");
  try {
    enqueue_sends();
  } catch (...) {
    ncclGroupEnd();
    throw;
  }
  check_nccl(ncclGroupEnd(), "ncclGroupEnd");
  wait("send", seq_++);
}

void NcclComm::do_barrier() {
  order_after_producers();
  enqueue_sends();
  check_nccl(ncclAllReduce(state_->scratch, state_->scratch, 1, ncclInt32, ncclSum, state_->comm,
                           on(state_->stream)),
             "ncclAllReduce (barrier)");
  wait("barrier", seq_++);
}

std::unique_ptr<Communicator> NcclComm::do_split(int color, int key) {
  do_flush();
#if NCCL_VERSION_CODE >= 21800
  ncclComm_t out = nullptr;
  check_nccl(ncclCommSplit(state_->comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &out, nullptr),
             "ncclCommSplit");
  if (out == nullptr) return nullptr;
  auto state = std::make_unique<detail::NcclState>();
  state->comm = out;
  state->device = state_->device;
  // The parent's stream: the data's producers order on it already.
  state->stream = state_->stream;
  state->foreign_stream = state_->foreign_stream;
  if (!state->foreign_stream) {
    state->stream = gpu::create_stream();
    state->own_stream = true;
  }
  state->scratch = static_cast<int*>(gpu::allocate(sizeof(int)));
  int rank = 0, size = 0;
  ncclCommUserRank(out, &rank);
  ncclCommCount(out, &size);
  return std::unique_ptr<NcclComm>(new NcclComm(std::move(state), rank, size, options_));
#else
  // No ncclCommSplit: split the bootstrap communicator and bootstrap anew.
  auto sub = state_->bootstrap->split(color, key);
  if (!sub) return nullptr;
  auto out = create(*sub, state_->device, state_->foreign_stream ? state_->stream : nullptr);
  out->state_->owned_bootstrap = std::move(sub);
  return out;
#endif
}

}  // namespace strata::comm
