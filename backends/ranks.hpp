// Thread ranks that run Kokkos kernels: each rank gets its own Context (an
// execution-space instance with its own threads) and a Threads communicator.
//
//   strata::run_ranks(2, 1, [&](Context& ctx, comm::Communicator& c) { ... });
//
// How instances are made depends on the Kokkos in use:
//   Kokkos 3.x, OpenMP: OpenMP::partition_master with nested parallelism, so
//     each rank is the master of its own partition of `threads_per_rank`
//     threads (Kokkos 3.x cannot launch kernels from other threads). Kokkos
//     must have been started with ranks x threads_per_rank threads.
//   Kokkos 4.x and newer, OpenMP: partition_space instances, one per rank,
//     driven from std::threads.
//   Serial-only Kokkos 3.x: refused (its Serial space has global state).
// A BLAS with OpenMP threads runs single-threaded inside a rank (Kokkos 3.x:
// nested in the partition's parallel region; Kokkos 4: each rank's thread
// sets its OpenMP thread count to 1).
#pragma once

#include "backends/comm/threads.hpp"
#include "backends/context.hpp"

#include <functional>
#include <memory>
#include <vector>

namespace strata {

void run_ranks(int ranks, int threads_per_rank,
               const std::function<void(Context&, comm::Communicator&)>& body,
               const comm::CommOptions& options = comm::CommOptions::from_environment());

// Thread ranks whose Contexts and communicators outlive one run (what
// run_ranks is one run of): a caller that owns the loop builds engines in one
// run and steps them in the next ones. Each rank's Context is made in its
// first run, on its own thread (Kokkos 3.x: inside its partition, so every
// run must come from the thread that started Kokkos, as run_ranks' must).
// After a rank fails, every later run throws (comm::ThreadTeam).
class RankTeam {
 public:
  RankTeam(int ranks, int threads_per_rank,
           const comm::CommOptions& options = comm::CommOptions::from_environment());
  ~RankTeam();
  RankTeam(const RankTeam&) = delete;
  RankTeam& operator=(const RankTeam&) = delete;

  int size() const { return team_.size(); }
  bool failed() const { return team_.failed(); }
  void run(const std::function<void(Context&, comm::Communicator&)>& body);

 private:
  int threads_per_rank_;
  comm::ThreadTeam team_;
  std::vector<std::unique_ptr<Context>> contexts_;
  std::vector<ExecSpace> instances_;  // Kokkos 4: one partition_space instance per rank
};

// Why run_ranks cannot run several ranks with this Kokkos ("" when it can):
// Kokkos 3.x launches kernels from one host thread only, except OpenMP's
// partitions.
std::string thread_ranks_unavailable();

// Number of host threads Kokkos runs with (the OpenMP pool size).
int kokkos_host_threads();

// The Kokkos command-line option that sets the host thread count (its name
// changed in Kokkos 3.7), e.g. "--kokkos-threads=4".
std::string kokkos_threads_option(int threads);

}  // namespace strata
