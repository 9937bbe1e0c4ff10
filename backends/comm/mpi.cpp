#include "backends/comm/mpi.hpp"

#include "backends/device.hpp"
#include "backends/device_check.hpp"
#include "backends/comm/mpi_watchdog.hpp"
#include "backends/comm/registry.hpp"

#include "backends/comm/reduce.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <csignal>
#include <cstdlib>
#include <mutex>
#include <cstring>
#include <limits>
#include <sstream>
#include <thread>
#include <vector>

#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif

namespace strata::comm {
namespace {

using Clock = std::chrono::steady_clock;

// Throws for an MPI error code, naming the call and the caller's file and
// line (STRATA_CHECK_MPI is a macro so that the error says where the call is).
void check_mpi_at(int code, const char* what, const char* file, int line) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  throw Error(ErrorKind::runtime, std::string("MPI: ") + what + " failed: " + std::string(text, len),
              file, line);
}
#define STRATA_CHECK_MPI(code, what) check_mpi_at((code), (what), __FILE__, __LINE__)

MPI_Datatype mpi_type(DataType t) {
  switch (t) {
    case DataType::f32: return MPI_FLOAT;
    case DataType::f64: return MPI_DOUBLE;
    case DataType::i32: return MPI_INT32_T;
    case DataType::i64: return MPI_INT64_T;
    case DataType::bf16:
    case DataType::f16: return MPI_UINT16_T;  // moved as bits; reduced by reduce_16bit
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::average: return MPI_SUM;
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
  }
  return MPI_OP_NULL;
}

int mpi_count(std::size_t count, const char* what) {
  STRATA_REQUIRE(count <= static_cast<std::size_t>(std::numeric_limits<int>::max()), config,
                 "MPI: ", what, " of ", count, " elements exceeds MPI's int count");
  return static_cast<int>(count);
}

bool g_initialized_here = false;
int g_thread_level = MPI_THREAD_SINGLE;

}  // namespace

namespace mpi {

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS",
                        "PMI_RANK", "MV2_COMM_WORLD_SIZE"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}

void initialize(int& argc, char**& argv) {
  // A write to a lost peer's socket (Open MPI's TCP transport) must fail
  // with EPIPE, not kill this process with SIGPIPE: a surviving rank is to
  // report the lost one (its watchdog, comm::progress), not die silently
  // while mpirun names the survivor as the process that failed.
  std::signal(SIGPIPE, SIG_IGN);
  int flag = 0;
  MPI_Initialized(&flag);
  if (flag) {
    MPI_Query_thread(&g_thread_level);
    return;
  }
  STRATA_CHECK_MPI(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &g_thread_level), "MPI_Init_thread");
  g_initialized_here = true;
  // Errors come back as codes (turned into strata::Error), not aborts.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  start_probing();  // a timed-out operation can name the ranks that were lost
}

void finalize() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (g_initialized_here && !finalized) {
    stop_probing();
    MPI_Finalize();
  }
  g_initialized_here = false;
}

bool initialized() {
  int flag = 0;
  MPI_Initialized(&flag);
  int finalized = 0;
  MPI_Finalized(&finalized);
  return flag && !finalized;
}

int thread_level() { return g_thread_level; }

bool cuda_aware() {
  if (const char* f = std::getenv("STRATA_MPI_CUDA_AWARE")) return std::string(f) == "1";
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
}

}  // namespace mpi

MpiComm::MpiComm(MPI_Comm comm, bool owned, const CommOptions& options)
    : Communicator(options), comm_(comm), owned_(owned) {
  STRATA_REQUIRE(mpi::initialized(), runtime, "MPI communicator created before MPI_Init");
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  // Device memory goes to MPI directly only when there is device memory (a
  // GPU build, or the device-memory check) and the library can take it.
  cuda_aware_ = device::has_device_memory() && mpi::cuda_aware();
  if (options_.check) STRATA_CHECK_MPI(MPI_Comm_dup(comm_, &check_comm_), "MPI_Comm_dup");
}

MpiComm::~MpiComm() {
  shutdown();
  if (!mpi::initialized()) return;
  try {
    reap_sends(true);
  } catch (...) {
    // A peer that never received: nothing more can be done here.
  }
  for (auto& w : windows_) {
    MPI_Win_unlock_all(w.win);
    MPI_Win_free(&w.win);
  }
  if (node_comm_ != MPI_COMM_NULL) MPI_Comm_free(&node_comm_);
  if (cross_comm_ != MPI_COMM_NULL) MPI_Comm_free(&cross_comm_);
  if (check_comm_ != MPI_COMM_NULL) MPI_Comm_free(&check_comm_);
  if (owned_) MPI_Comm_free(&comm_);
}

void MpiComm::complete(MPI_Request& request, const char* what, std::uint64_t seq) {
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(options_.timeout_s));
  int done = 0;
  // Poll hard for ~50 microseconds (small messages), then back off to
  // sleeps of up to 200 microseconds so a waiting rank leaves the core to
  // the computation.
  for (;;) {
    STRATA_CHECK_MPI(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what);
    if (done) return;
    const auto now = Clock::now();
    if (now >= deadline) {
      MPI_Cancel(&request);
      STRATA_THROW(runtime, "mpi communicator: ", what, " #", seq, " on rank ", rank_, " of ",
                   size_, " timed out after ", options_.timeout_s,
                   " s (STRATA_COMM_TIMEOUT sets the limit; STRATA_COMM_CHECK=1 names the "
                   "ranks that did not arrive)");
    }
    const auto waited = std::chrono::duration<double>(now - start).count();
    if (waited > 50e-6)
      std::this_thread::sleep_for(std::chrono::microseconds(waited > 5e-3 ? 200 : 20));
  }
}

void MpiComm::check(const char* what, std::uint64_t seq, std::size_t count, DataType type, int op,
                    int root) {
  if (!options_.check || size_ == 1) return;
  // Descriptor: kind name hash, seq, count, type, op, root.
  std::uint64_t kind = 0;
  for (const char* p = what; *p; ++p) kind = kind * 131 + static_cast<unsigned char>(*p);
  const std::uint64_t mine[6] = {kind, seq, count, static_cast<std::uint64_t>(type),
                                 static_cast<std::uint64_t>(op), static_cast<std::uint64_t>(root)};
  constexpr int tag_desc = 1, tag_verdict = 2;
  auto describe = [&](const std::uint64_t* d) {
    std::ostringstream os;
    os << "#" << d[1] << " (" << d[2] << " elements, type " << d[3] << ", op " << d[4]
       << ", root " << d[5] << ", kind " << d[0] << ")";
    return os.str();
  };
  std::string verdict;
  if (rank_ == 0) {
    std::vector<std::uint64_t> all(6 * size_);
    std::vector<MPI_Request> reqs(size_, MPI_REQUEST_NULL);
    for (int r = 1; r < size_; ++r)
      MPI_Irecv(&all[6 * r], 6, MPI_UINT64_T, r, tag_desc, check_comm_, &reqs[r]);
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(options_.timeout_s));
    std::vector<int> done(size_, 0);
    done[0] = 1;
    for (;;) {
      bool all_done = true;
      for (int r = 1; r < size_; ++r) {
        if (!done[r]) MPI_Test(&reqs[r], &done[r], MPI_STATUS_IGNORE);
        all_done = all_done && done[r];
      }
      if (all_done) break;
      if (Clock::now() >= deadline) {
        std::ostringstream missing;
        int k = 0;
        for (int r = 1; r < size_; ++r)
          if (!done[r]) {
            missing << (k++ ? ", " : "") << r;
            MPI_Cancel(&reqs[r]);
          }
        verdict = std::string("mpi communicator: ") + what + " #" + std::to_string(seq) +
                  " timed out after " + std::to_string(options_.timeout_s) + " s; rank(s) " +
                  missing.str() + " did not arrive";
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    for (int r = 1; r < size_ && verdict.empty(); ++r)
      if (std::memcmp(&all[6 * r], mine, sizeof mine) != 0)
        verdict = std::string("mpi communicator: collective mismatch: rank 0 calls ") + what +
                  " " + describe(mine) + " but rank " + std::to_string(r) + " calls " +
                  describe(&all[6 * r]);
    for (int r = 1; r < size_; ++r)
      if (done[r])
        MPI_Send(verdict.c_str(), static_cast<int>(verdict.size()), MPI_CHAR, r, tag_verdict,
                 check_comm_);
  } else {
    MPI_Request req;
    MPI_Isend(mine, 6, MPI_UINT64_T, 0, tag_desc, check_comm_, &req);
    complete(req, "check (send descriptor to rank 0)", seq);
    MPI_Status status;
    MPI_Request vreq;
    std::vector<char> buf(4096);
    MPI_Irecv(buf.data(), static_cast<int>(buf.size()), MPI_CHAR, 0, tag_verdict, check_comm_, &vreq);
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(options_.timeout_s));
    int done = 0;
    while (!done) {
      MPI_Test(&vreq, &done, &status);
      if (done) break;
      if (Clock::now() >= deadline) {
        MPI_Cancel(&vreq);
        STRATA_THROW(runtime, "mpi communicator: ", what, " #", seq, " on rank ", rank_,
                     ": no verdict from rank 0 within ", options_.timeout_s,
                     " s; rank 0 did not arrive");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    int len = 0;
    MPI_Get_count(&status, MPI_CHAR, &len);
    verdict.assign(buf.data(), len);
  }
  if (!verdict.empty()) STRATA_THROW(runtime, verdict);
}

void* MpiComm::allocate_shared(std::size_t bytes) {
  // Host memory only, more than one rank, and not switched off.
  if (size_ == 1 || !Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible)
    return nullptr;
  if (const char* e = std::getenv("STRATA_MPI_SHM"); e && std::string(e) == "0") return nullptr;
  if (!shm_setup_) {  // collective, once: the node and cross-node groups
    shm_setup_ = true;
    STRATA_CHECK_MPI(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node_comm_),
              "MPI_Comm_split_type");
    MPI_Comm_rank(node_comm_, &node_rank_);
    MPI_Comm_size(node_comm_, &node_size_);
    int sizes[2] = {node_size_, -node_size_};
    STRATA_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, sizes, 2, MPI_INT, MPI_MAX, comm_), "MPI_Allreduce");
    // Every node must hold the same number of ranks (slices line up), and
    // sharing only pays with at least two ranks on a node.
    shm_ok_ = sizes[0] == -sizes[1] && node_size_ > 1;
    nodes_ = size_ / node_size_;
    if (shm_ok_ && nodes_ > 1)
      STRATA_CHECK_MPI(MPI_Comm_split(comm_, node_rank_, rank_, &cross_comm_), "MPI_Comm_split");
  }
  if (!shm_ok_) return nullptr;
  Window w;
  w.bytes = bytes;
  void* mine = nullptr;
  const auto aligned = static_cast<MPI_Aint>((bytes + 63) / 64 * 64);
  STRATA_CHECK_MPI(MPI_Win_allocate_shared(aligned, 1, MPI_INFO_NULL, node_comm_, &mine, &w.win),
            "MPI_Win_allocate_shared");
  MPI_Win_lock_all(MPI_MODE_NOCHECK, w.win);
  for (int k = 0; k < node_size_; ++k) {
    MPI_Aint size = 0;
    int unit = 0;
    void* base = nullptr;
    STRATA_CHECK_MPI(MPI_Win_shared_query(w.win, k, &size, &unit, &base), "MPI_Win_shared_query");
    w.base.push_back(static_cast<unsigned char*>(base));
  }
  windows_.push_back(std::move(w));
  return mine;
}

const MpiComm::Window* MpiComm::window_of(const void* p, std::size_t bytes) const {
  const auto* c = static_cast<const unsigned char*>(p);
  for (const auto& w : windows_) {
    const unsigned char* mine = w.base[node_rank_];
    if (c >= mine && c + bytes <= mine + w.bytes) return &w;
  }
  return nullptr;
}

// Allreduce of a buffer at the same offset of every local rank's segment:
// each local rank reduces its slice of the buffer over all segments (fixed
// order: bitwise identical everywhere), with several nodes sums that slice
// across nodes with MPI, and writes the result into every segment. Two node
// barriers order the phases; no data moves through MPI within a node.
void MpiComm::shared_allreduce(const Window& w, void* buf, std::size_t count, DataType type,
                               ReduceOp op, std::uint64_t seq) {
  const std::size_t elem = size_of(type);
  const std::size_t offset = static_cast<std::size_t>(static_cast<unsigned char*>(buf) -
                                                      w.base[node_rank_]);
  const std::size_t n = count, L = static_cast<std::size_t>(node_size_);
  const std::size_t base = n / L, extra = n % L, l = static_cast<std::size_t>(node_rank_);
  const std::size_t begin = l * base + std::min(l, extra), end = begin + base + (l < extra ? 1 : 0);
  std::vector<const void*> srcs(L);
  for (std::size_t k = 0; k < L; ++k) srcs[k] = w.base[k] + offset;
  mpi::Watched watch("allreduce (shared memory)", seq, rank_, size_, options_.timeout_s,
                     count * size_of(type));
  MPI_Win_sync(w.win);
  STRATA_CHECK_MPI(MPI_Barrier(node_comm_), "MPI_Barrier");  // every input is written
  MPI_Win_sync(w.win);
  const ReduceOp local = op == ReduceOp::average ? ReduceOp::sum : op;
  unsigned char* slice = static_cast<unsigned char*>(buf) + begin * elem;
  if (nodes_ == 1) {
    // Reduce a block, then copy it to the other segments while it is in cache.
    constexpr std::size_t block = 16384;
    for (std::size_t b = begin; b < end; b += block) {
      const std::size_t e = std::min(end, b + block);
      detail::reduce(type, local, buf, srcs.data(), static_cast<int>(L), b, e);
      unsigned char* mine = static_cast<unsigned char*>(buf) + b * elem;
      if (op == ReduceOp::average) detail::finish_average(type, mine, e - b, size_);
      for (std::size_t k = 0; k < L; ++k)
        if (k != l) std::memcpy(w.base[k] + offset + b * elem, mine, (e - b) * elem);
    }
  } else {
    detail::reduce(type, local, buf, srcs.data(), static_cast<int>(L), begin, end);
    STRATA_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, slice, mpi_count(end - begin, "allreduce"),
                            mpi_type(type), mpi_op(local), cross_comm_),
              "MPI_Allreduce (across nodes)");
    if (op == ReduceOp::average) detail::finish_average(type, slice, end - begin, size_);
    for (std::size_t k = 0; k < L; ++k)
      if (k != l && end > begin)
        std::memcpy(w.base[k] + offset + begin * elem, slice, (end - begin) * elem);
  }
  MPI_Win_sync(w.win);
  STRATA_CHECK_MPI(MPI_Barrier(node_comm_), "MPI_Barrier");  // every output is written
  MPI_Win_sync(w.win);
}

static bool is_16bit(DataType t) { return t == DataType::bf16 || t == DataType::f16; }

Memory MpiComm::memory(Op op, DataType type, ReduceOp reduce) const {
  if (!cuda_aware_ || is_16bit(type) || reduce == ReduceOp::average || op == Op::reduce_scatter ||
      op == Op::send)
    return Memory::host;
  return Memory::any;
}

void MpiComm::reduce_16bit(const void* blocks, void* mine, std::size_t block, DataType type,
                           ReduceOp op, std::uint64_t seq) {
  work16_.resize(block * size_);
  {
    mpi::Watched watch("allreduce (16-bit all-to-all)", seq, rank_, size_, options_.timeout_s,
                       block * size_ * 2);
    STRATA_CHECK_MPI(MPI_Alltoall(blocks, mpi_count(block, "alltoall"), MPI_UINT16_T, work16_.data(),
                           mpi_count(block, "alltoall"), MPI_UINT16_T, comm_),
              "MPI_Alltoall");
  }
  std::vector<const void*> srcs(size_);
  for (int k = 0; k < size_; ++k) srcs[k] = work16_.data() + k * block;
  detail::reduce(type, op, mine, srcs.data(), size_, 0, block);  // average divides before rounding
}

void MpiComm::do_allreduce(const void* send, void* recv, std::size_t count, DataType type,
                           ReduceOp op) {
  const std::uint64_t seq = seq_++;
  check("allreduce", seq, count, type, static_cast<int>(op), 0);
  if (is_16bit(type)) {
    const std::size_t block = (count + size_ - 1) / size_;
    pad16_.assign(block * size_, 0);
    if (count > 0) std::memcpy(pad16_.data(), send, count * 2);
    mine16_.resize(block);
    reduce_16bit(pad16_.data(), mine16_.data(), block, type, op, seq);
    {
      mpi::Watched watch("allreduce (16-bit allgather)", seq, rank_, size_, options_.timeout_s,
                         block * size_ * 2);
      STRATA_CHECK_MPI(MPI_Allgather(mine16_.data(), mpi_count(block, "allgather"), MPI_UINT16_T,
                              pad16_.data(), mpi_count(block, "allgather"), MPI_UINT16_T, comm_),
                "MPI_Allgather");
    }
    if (count > 0) std::memcpy(recv, pad16_.data(), count * 2);
    return;
  }
  if (send == recv && !windows_.empty()) {
    if (const Window* w = window_of(recv, count * size_of(type))) {
      shared_allreduce(*w, recv, count, type, op, seq);
      return;
    }
  }
  {
    mpi::Watched watch("allreduce", seq, rank_, size_, options_.timeout_s, count * size_of(type));
    // The library reads and writes the buffers (device memory when CUDA-aware).
    device::check::Access access({{send, count * size_of(type)}, {recv, count * size_of(type)}});
    STRATA_CHECK_MPI(MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv,
                            mpi_count(count, "allreduce"), mpi_type(type), mpi_op(op), comm_),
              "MPI_Allreduce");
  }
  if (op == ReduceOp::average) detail::finish_average(type, recv, count, size_);
}

void MpiComm::do_reduce_scatter(const void* send, void* recv, std::size_t count, DataType type,
                                ReduceOp op) {
  const std::uint64_t seq = seq_++;
  check("reduce_scatter", seq, count, type, static_cast<int>(op), 0);
  if (is_16bit(type)) {  // recv may be block r of send: the all-to-all has copied it first
    reduce_16bit(send, recv, count, type, op, seq);
    return;
  }
  // In place when recv is this rank's block of send.
  const bool in_place =
      static_cast<const char*>(send) + rank_ * count * size_of(type) == static_cast<char*>(recv);
  {
    // MPI_Reduce_scatter with equal counts, not MPI_Reduce_scatter_block:
    // the same sum, but Open MPI 4.1's _block ran 18-24x slower than an
    // allreduce from 1 MiB between processes of one node, while this call ran
    // at 0.5-1.05x the allreduce's time (docs/benchmarks.md, "the MPI
    // reduce-scatter: MPI_Reduce_scatter, not _block").
    counts_.assign(static_cast<std::size_t>(size_), mpi_count(count, "reduce_scatter"));
    mpi::Watched watch("reduce_scatter", seq, rank_, size_, options_.timeout_s,
                     count * size_ * size_of(type));
    STRATA_CHECK_MPI(MPI_Reduce_scatter(in_place ? MPI_IN_PLACE : send,
                                        in_place ? const_cast<void*>(send) : recv, counts_.data(),
                                        mpi_type(type), mpi_op(op), comm_),
                     "MPI_Reduce_scatter");
  }
  if (in_place && count > 0)  // MPI leaves the result at the start of the buffer
    std::memmove(recv, send, count * size_of(type));
  if (op == ReduceOp::average) detail::finish_average(type, recv, count, size_);
}

void MpiComm::do_allgather(const void* send, void* recv, std::size_t count, DataType type) {
  const std::uint64_t seq = seq_++;
  check("allgather", seq, count, type, 0, 0);
  const bool in_place =
      static_cast<char*>(recv) + rank_ * count * size_of(type) == static_cast<const char*>(send);
  const int n = mpi_count(count, "allgather");
  mpi::Watched watch("allgather", seq, rank_, size_, options_.timeout_s,
                     count * size_ * size_of(type));
  device::check::Access access({{send, count * size_of(type)}, {recv, count * size_of(type) * size_}});
  STRATA_CHECK_MPI(MPI_Allgather(in_place ? MPI_IN_PLACE : send, n, mpi_type(type), recv, n,
                          mpi_type(type), comm_),
            "MPI_Allgather");
}

void MpiComm::do_broadcast(void* buf, std::size_t count, DataType type, int root) {
  const std::uint64_t seq = seq_++;
  check("broadcast", seq, count, type, 0, root);
  mpi::Watched watch("broadcast", seq, rank_, size_, options_.timeout_s, count * size_of(type));
  device::check::Access access({{buf, count * size_of(type)}});
  STRATA_CHECK_MPI(MPI_Bcast(buf, mpi_count(count, "broadcast"), mpi_type(type), root, comm_),
            "MPI_Bcast");
}

void MpiComm::reap_sends(bool wait) {
  while (!pending_sends_.empty()) {
    auto& front = pending_sends_.front();
    if (wait) {
      complete(front.request, "send", 0);
    } else {
      int done = 0;
      STRATA_CHECK_MPI(MPI_Test(&front.request, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (!done) return;
    }
    pending_sends_.pop_front();
  }
}

void MpiComm::do_send(const void* buf, std::size_t count, DataType type, int dest, int tag) {
  reap_sends(false);
  const auto* p = static_cast<const unsigned char*>(buf);
  pending_sends_.push_back({std::vector<unsigned char>(p, p + count * size_of(type)), MPI_REQUEST_NULL});
  auto& s = pending_sends_.back();
  STRATA_CHECK_MPI(MPI_Isend(s.data.data(), mpi_count(count, "send"), mpi_type(type), dest, tag, comm_,
                      &s.request),
            "MPI_Isend");
}

void MpiComm::do_recv(void* buf, std::size_t count, DataType type, int source, int tag) {
  reap_sends(false);
  MPI_Request req;
  MPI_Status status;
  device::check::Access access({{buf, count * size_of(type)}});  // MPI writes it while we wait
  STRATA_CHECK_MPI(MPI_Irecv(buf, mpi_count(count, "recv"), mpi_type(type), source, tag, comm_, &req),
            "MPI_Irecv");
  // Wait with the deadline, then check the size of what arrived.
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(options_.timeout_s));
  int done = 0;
  const auto start = Clock::now();
  while (!done) {
    STRATA_CHECK_MPI(MPI_Test(&req, &done, &status), "MPI_Test");
    if (done) break;
    const auto now = Clock::now();
    if (now >= deadline) {
      MPI_Cancel(&req);
      STRATA_THROW(runtime, "mpi communicator: rank ", rank_, ": recv from rank ", source,
                   " (tag ", tag, ") timed out after ", options_.timeout_s, " s");
    }
    if (std::chrono::duration<double>(now - start).count() > 50e-6)
      std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  int received = 0;
  MPI_Get_count(&status, mpi_type(type), &received);
  STRATA_REQUIRE(static_cast<std::size_t>(received) == count, runtime, "mpi communicator: rank ",
                 rank_, " expects ", count, " x ", to_string(type), " from rank ", source,
                 " (tag ", tag, ") but received ", received);
}

void MpiComm::do_barrier() {
  const std::uint64_t seq = seq_++;
  check("barrier", seq, 0, DataType::f32, 0, 0);
  mpi::Watched watch("barrier", seq, rank_, size_, options_.timeout_s);
  STRATA_CHECK_MPI(MPI_Barrier(comm_), "MPI_Barrier");
}

std::unique_ptr<Communicator> MpiComm::do_split(int color, int key) {
  const std::uint64_t seq = seq_++;
  check("split", seq, 0, DataType::f32, 0, 0);
  MPI_Comm out = MPI_COMM_NULL;
  mpi::Watched watch("split", seq, rank_, size_, options_.timeout_s);
  STRATA_CHECK_MPI(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &out), "MPI_Comm_split");
  if (out == MPI_COMM_NULL) return nullptr;
  return std::make_unique<MpiComm>(out, true, options_);
}

}  // namespace strata::comm

namespace strata::comm {

const ProcessBackend& mpi_backend() {
  static const ProcessBackend backend{
      "mpi",
      true,
      &mpi::launched_by_mpi,
      &mpi::initialize,
      &mpi::finalize,
      &mpi::initialized,
      []() -> std::unique_ptr<Communicator> { return std::make_unique<MpiComm>(MPI_COMM_WORLD, false); },
      [](int code) {
        if (mpi::initialized()) MPI_Abort(MPI_COMM_WORLD, code);
      },
  };
  return backend;
}

}  // namespace strata::comm
