// Thread ranks: N ranks as threads of one process sharing memory.
//
//   comm::run_thread_ranks(4, [&](comm::Communicator& c) { ... c.allreduce(v); ... });
//
// Algorithms (host memory; device Views are staged by the wrappers):
//   allreduce, large: every rank reduces its 1/N slice reading every peer's
//     buffer (rank order fixed) and writes the result into every rank's
//     buffer: 2 N S bytes of traffic for S bytes on N ranks, the minimum any
//     in-place algorithm must move, and two barriers.
//   allreduce, small (<= 64 KiB): each rank copies its input to a shared
//     double-buffered slot and reduces all slots itself: one barrier.
// Every collective first publishes a descriptor (operation, count, type,
// sequence number); all ranks compare them after the first barrier, so a
// mismatch fails on every rank with an error naming it instead of hanging.
// Waits spin briefly, then yield, then block, so a rank that waits long does
// not burn a core the others need.
#pragma once

#include "backends/comm/communicator.hpp"

#include <functional>
#include <exception>
#include <memory>
#include <vector>

namespace strata::comm {

namespace detail {
class ThreadsGroup;
struct Failure;
}

// Busy-wait iterations a waiting thread rank spins before yielding, with
// `busy` host threads at work on the node: 4000 while they fit its cores,
// else 16 (a peer may need this rank's core).
int spin_limit(int busy);

class ThreadsComm final : public Communicator {
 public:
  ThreadsComm(std::shared_ptr<detail::ThreadsGroup> group, int rank);
  ~ThreadsComm() override;

  int rank() const override { return rank_; }
  int size() const override;
  std::string name() const override { return "threads"; }
  // The spin limit of this group's waits (spin_limit of its busy threads).
  int spins() const;

 protected:
  STRATA_COMM_TRANSPORT_OVERRIDES

 private:
  std::shared_ptr<detail::ThreadsGroup> group_;
  int rank_;
  std::uint64_t seq_ = 0;  // collectives issued on this communicator
};

// Starts `ranks` threads, calls rank_body(r) on thread r and joins them all.
// The default starts std::threads; strata::run_ranks (backends/ranks.hpp)
// passes one that gives each thread its own Kokkos execution-space instance.
using Spawner = std::function<void(int ranks, const std::function<void(int rank)>& rank_body)>;

// Thread ranks whose communicators outlive one run: what a caller that owns
// the loop (a Python script calling step()) needs, the engines built in one
// run being used in the next.
//
//   comm::ThreadTeam team(4);
//   team.run([&](int r) { engines[r] = build(team.comm(r)); });
//   team.run([&](int r) { engines[r]->step(...); });   // again and again
//
// When a rank throws, the others fail too (their waits end with an error
// naming the failed rank), the first rank's exception is rethrown by run(),
// and every later run() throws at once: the team is over.
class ThreadTeam {
 public:
  explicit ThreadTeam(int ranks, const CommOptions& options = CommOptions::from_environment());
  ~ThreadTeam();
  ThreadTeam(const ThreadTeam&) = delete;
  ThreadTeam& operator=(const ThreadTeam&) = delete;

  int size() const { return static_cast<int>(comms_.size()); }
  Communicator& comm(int rank) { return *comms_.at(static_cast<std::size_t>(rank)); }
  // Whether a rank failed (every later run() throws).
  bool failed() const;
  // Calls body(r) for every rank on `ranks` threads (spawner; default:
  // std::threads, rank 0 on the calling thread) and returns when all are done.
  void run(const std::function<void(int rank)>& body, const Spawner& spawner = Spawner());

 private:
  std::shared_ptr<detail::Failure> failure_;
  std::shared_ptr<detail::ThreadsGroup> group_;
  std::vector<std::unique_ptr<ThreadsComm>> comms_;
  std::exception_ptr first_error_;
};

// Runs body(comm) on `ranks` threads, one rank each, and returns when all are
// done: one run of a ThreadTeam. Thread ranks that launch Kokkos kernels must
// use strata::run_ranks instead.
void run_thread_ranks(int ranks, const std::function<void(Communicator&)>& body,
                      const CommOptions& options = CommOptions::from_environment(),
                      const Spawner& spawner = Spawner());

}  // namespace strata::comm
