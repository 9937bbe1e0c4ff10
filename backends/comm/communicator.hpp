// The communicator interface every strategy moves data through.
//
// Implementations: Self (one rank), Threads (ranks as threads of one process),
// MPI (processes and nodes), NCCL (GPUs). The primitives take raw pointers,
// an element count and a data type, in host or device memory: they stage
// buffers through copies where the transport works on the other memory
// (Communicator::memory). The View wrappers below check sizes.
//
// Semantics (n = size()):
//   allreduce(send, recv, count)       recv = op over ranks of send (send == recv: in place);
//                                      bf16/f16: summed in float in rank order, rounded once
//   reduce_scatter(send, recv, count)  send holds n blocks of `count`; rank r gets block r reduced
//                                      (recv may be block r of send; the other blocks are then
//                                      undefined afterwards)
//   allgather(send, recv, count)       recv holds n blocks of `count`, block r from rank r
//   broadcast(buf, count, root)        every rank gets root's buf
//   send/recv(buf, count, peer, tag)   point to point, matched by (source, tag); send
//                                      returns once buf may be reused
//   flush()                            starts the sends a transport holds back (below)
// NCCL holds sends back until this rank's next receive, collective or
// flush() on the communicator, and then runs them together with it (a ring
// of sends before receives, or a pipeline's exchange, then progresses). A
// rank whose last operation in a phase is a send calls flush(); a send must
// be received before the receiver's next collective on the communicator.
// The other transports send eagerly (flush() does nothing).
//
// Collectives are matched in the order each rank issues them on a
// communicator; every rank must issue the same sequence. Reductions run in a
// fixed order, so results do not depend on timing and are bitwise identical
// on every rank.
//
// Never hang silently: every blocking wait has a timeout (CommOptions) after
// which the rank throws strata::Error naming the operation, its sequence
// number and, where the transport can tell, the ranks that did not arrive. A
// rank that fails makes the others fail instead of wait.
#pragma once

#include "backends/exact_sum.hpp"
#include "backends/error.hpp"
#include "backends/kokkos.hpp"
#include "backends/precision.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace strata::comm {

enum class ReduceOp { sum, average, max, min };
// bf16 and f16 are 16-bit storage types (backends/precision.hpp); their
// reductions accumulate in float and round once (every transport but NCCL,
// which uses its own 16-bit reductions; see docs/mixed-precision.md).
enum class DataType { f32, f64, i32, i64, bf16, f16 };

const char* to_string(ReduceOp op);
const char* to_string(DataType type);
std::size_t size_of(DataType type);

template <class T>
constexpr DataType data_type_of() {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, float>) return DataType::f32;
  else if constexpr (std::is_same_v<U, double>) return DataType::f64;
  else if constexpr (std::is_same_v<U, std::int32_t>) return DataType::i32;
  else if constexpr (std::is_same_v<U, bf16>) return DataType::bf16;
  else if constexpr (std::is_same_v<U, fp16>) return DataType::f16;
  else {
    static_assert(std::is_same_v<U, std::int64_t>,
                  "communicators move float, double, int32, int64, bf16 and fp16 elements");
    return DataType::i64;
  }
}

// Where a transport's do_* functions may be given buffers. The front doors
// move buffers that are elsewhere through copies (device::copy): device
// memory through host memory for a host transport, host memory through
// device memory for a device-only one (NCCL). device::is_device decides.
enum class Memory { host, device, any };
enum class Op { allreduce, reduce_scatter, allgather, broadcast, send, recv };

// Process-wide settings of every communicator, read from the environment
// once: STRATA_COMM_TIMEOUT (seconds, default 300) and STRATA_COMM_CHECK=1
// (verify that all ranks call the same collective with the same count and
// type before moving data; on by nature for Threads, extra messages for MPI).
struct CommOptions {
  double timeout_s = 300;
  bool check = false;
  // Host threads busy on this node, every process's thread ranks counted
  // (run_world sets it; 0: this group's ranks alone). Thread ranks waiting
  // for a peer spin only while these fit the node's cores.
  int node_threads = 0;
  static CommOptions from_environment();
};

// Completion handle of an asynchronous collective. wait() blocks until it is
// done and rethrows its error, if any; a handle that is never waited for is
// waited for by its destructor (errors then are lost, never thrown).
class Handle {
 public:
  struct State;
  Handle() = default;
  explicit Handle(std::shared_ptr<State> state) : state_(std::move(state)) {}
  Handle(Handle&&) noexcept = default;
  Handle& operator=(Handle&& other) noexcept;
  ~Handle();
  void wait();
  bool valid() const { return state_ != nullptr; }
  // True when the operation has finished (without waiting).
  bool ready() const;

 private:
  std::shared_ptr<State> state_;
};

class Communicator {
 public:
  virtual ~Communicator();

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "threads", "mpi", "nccl", "self"
  virtual std::string name() const = 0;
  // The memory the transport works on for an operation (default: host).
  // The primitives take buffers anywhere; this says which ones are staged.
  virtual Memory memory(Op /*op*/, DataType /*type*/, ReduceOp /*reduce*/) const {
    return Memory::host;
  }
  // Whether a float sum goes to the transport in device memory unstaged
  // (gradient buckets are staged by their owner otherwise, with overlap).
  bool accepts_device_memory() const {
    return memory(Op::allreduce, DataType::f32, ReduceOp::sum) != Memory::host;
  }
  // Host memory for a buffer this communicator reduces often (gradients),
  // where the transport can do better than with private memory: MPI ranks
  // on one node get a slice of a shared-memory window, and allreduce of a
  // buffer in it reduces in place across the processes (no copies through
  // MPI). Collective: every rank calls it with the same size, and then uses
  // the buffer at the same offsets. nullptr when the transport has no such
  // memory. The memory lives as long as the communicator.
  virtual void* allocate_shared(std::size_t /*bytes*/) { return nullptr; }

  // -------------------------------------------------------------- primitives
  // Front doors: check the arguments, keep issue order with asynchronous
  // operations, then call the transport (do_* below).
  void allreduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op);
  void reduce_scatter(const void* send, void* recv, std::size_t count, DataType type,
                      ReduceOp op);
  void allgather(const void* send, void* recv, std::size_t count, DataType type);
  void broadcast(void* buf, std::size_t count, DataType type, int root);
  void send(const void* buf, std::size_t count, DataType type, int dest, int tag);
  void recv(void* buf, std::size_t count, DataType type, int source, int tag);
  void flush();
  void barrier();
  // Ranks with the same color form a new communicator, ordered by (key, rank).
  // Every rank must call it. color < 0: the rank joins no group (nullptr).
  std::unique_ptr<Communicator> split(int color, int key);

  // ------------------------------------------------------------ asynchronous
  // Start the collective and return at once; buffers must stay valid and
  // untouched until the handle's wait() returns. Collectives (blocking or
  // not) still match in issue order on each communicator.
  Handle iallreduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op);
  Handle ireduce_scatter(const void* send, void* recv, std::size_t count, DataType type,
                         ReduceOp op);
  Handle iallgather(const void* send, void* recv, std::size_t count, DataType type);
  // Waits until every asynchronous operation issued so far has finished.
  void wait_all();

  // ------------------------------------------------------ View wrappers
  // Contiguous Views in any memory space (the primitives stage as needed).
  template <class View>
  void allreduce(const View& v, ReduceOp op = ReduceOp::sum) {
    if (size() == 1) return;  // in place on one rank: nothing to move
    allreduce(v.data(), v.data(), v.size(), type_of(v), op);
  }
  template <class View>
  void broadcast(const View& v, int root) {
    if (size() == 1) return;
    broadcast(v.data(), v.size(), type_of(v), root);
  }
  template <class View>
  void send(const View& v, int dest, int tag) {
    send(v.data(), v.size(), type_of(v), dest, tag);
  }
  template <class View>
  void recv(const View& v, int source, int tag) {
    recv(v.data(), v.size(), type_of(v), source, tag);
  }
  // send: (n * count); recv: (count)
  template <class ViewS, class ViewR>
  void reduce_scatter(const ViewS& send, const ViewR& recv, ReduceOp op = ReduceOp::sum) {
    STRATA_REQUIRE(send.size() == recv.size() * static_cast<std::size_t>(size()), config,
                   "reduce_scatter: send buffer of ", send.size(), " elements for ", size(),
                   " ranks x ", recv.size());
    reduce_scatter(send.data(), recv.data(), recv.size(), type_of(recv), op);
  }
  // send: (count); recv: (n * count)
  template <class ViewS, class ViewR>
  void allgather(const ViewS& send, const ViewR& recv) {
    STRATA_REQUIRE(recv.size() == send.size() * static_cast<std::size_t>(size()), config,
                   "allgather: receive buffer of ", recv.size(), " elements for ", size(),
                   " ranks x ", send.size());
    allgather(send.data(), recv.data(), send.size(), type_of(send));
  }

  // Reduces one value over ranks (host value in, host value out).
  template <class T>
  T allreduce_value(T value, ReduceOp op = ReduceOp::sum) {
    allreduce(&value, &value, 1, data_type_of<T>(), op);
    return value;
  }

  // An exact sum over ranks (backends/exact_sum.hpp): both of its doubles
  // summed, which is exact in any order, so every rank count gives the same.
  ExactSum allreduce_exact(ExactSum s) {
    double v[3] = {s.hi, s.lo, s.big};
    allreduce(v, v, 3, DataType::f64, ReduceOp::sum);
    s.hi = v[0];
    s.lo = v[1];
    s.big = v[2];
    return s;
  }

  const CommOptions& options() const { return options_; }

 protected:
  explicit Communicator(const CommOptions& options);

  // The transport. Called with valid arguments, in issue order, from one
  // thread at a time (the caller's or the progress thread).
  virtual void do_allreduce(const void* send, void* recv, std::size_t count, DataType type,
                            ReduceOp op) = 0;
  virtual void do_reduce_scatter(const void* send, void* recv, std::size_t count,
                                 DataType type, ReduceOp op) = 0;
  virtual void do_allgather(const void* send, void* recv, std::size_t count, DataType type) = 0;
  virtual void do_broadcast(void* buf, std::size_t count, DataType type, int root) = 0;
  virtual void do_send(const void* buf, std::size_t count, DataType type, int dest, int tag) = 0;
  virtual void do_recv(void* buf, std::size_t count, DataType type, int source, int tag) = 0;
  virtual void do_barrier() = 0;
  virtual std::unique_ptr<Communicator> do_split(int color, int key) = 0;
  // Starts held-back sends (see flush()); transports that send eagerly keep
  // this default.
  virtual void do_flush() {}

  // Stops the progress thread (after its pending work). Implementations call
  // it first thing in their destructor, before their state goes away.
  void shutdown() noexcept;

  CommOptions options_;

 private:
  class Progress;
  // Runs op inline when nothing asynchronous is pending, else queues it
  // behind the pending operations and waits: issue order is kept.
  void ordered(const std::function<void()>& op);
  Handle submit(std::function<void()> op);
  void check_peer(int peer, const char* what) const;
  std::unique_ptr<Progress> progress_;

  template <class View>
  static constexpr DataType type_of(const View&) {
    return data_type_of<typename View::value_type>();
  }

  // One buffer of an operation: read (in) and/or written (out).
  struct Buffer {
    const void* p;
    std::size_t bytes;
    bool in, out;
  };
  // Calls the transport with a and b where memory() says it works (staging
  // copies where they are elsewhere), under the device-memory check's
  // protection for device buffers it gets (backends/device_check.hpp).
  // One buffer may lie inside the other (in-place operations).
  void on_memory(const char* what, Op op, DataType type, ReduceOp reduce, Buffer a, Buffer b,
                 const std::function<void(void*, void*)>& transport);
  // The collectives through on_memory (blocking and asynchronous ones).
  void staged_allreduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op);
  void staged_reduce_scatter(const void* send, void* recv, std::size_t count, DataType type,
                             ReduceOp op);
  void staged_allgather(const void* send, void* recv, std::size_t count, DataType type);
  // Staging buffers, reused (operations on a communicator never overlap).
  std::vector<unsigned char> host_stage_[2];
  Kokkos::View<unsigned char*, MemSpace> device_stage_[2];
};

}  // namespace strata::comm

// Declares every transport entry point (the do_* functions above) in a
// communicator implementation, so that each transport lists them once.
#define STRATA_COMM_TRANSPORT_OVERRIDES                                                      \
  void do_allreduce(const void* send, void* recv, std::size_t count, DataType type,          \
                    ReduceOp op) override;                                                   \
  void do_reduce_scatter(const void* send, void* recv, std::size_t count, DataType type,     \
                         ReduceOp op) override;                                              \
  void do_allgather(const void* send, void* recv, std::size_t count, DataType type) override; \
  void do_broadcast(void* buf, std::size_t count, DataType type, int root) override;         \
  void do_send(const void* buf, std::size_t count, DataType type, int dest, int tag) override; \
  void do_recv(void* buf, std::size_t count, DataType type, int source, int tag) override;   \
  void do_barrier() override;                                                                \
  std::unique_ptr<Communicator> do_split(int color, int key) override;
