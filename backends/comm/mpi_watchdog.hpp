// The watchdog of blocking MPI operations, and the liveness probe that names
// the ranks a timed-out operation waits for.
//
// Blocking MPI collectives are the fast path (Open MPI's nonblocking ones are
// several times slower for small messages), so a timeout cannot be an
// exception in the waiting thread. A watchdog thread instead checks the
// operations in flight; when one exceeds its timeout, it asks every other
// process whether it is alive (a ping on a private duplicate of
// MPI_COMM_WORLD, answered by the other processes' watchdog threads, which
// reply with the operation they are in), prints the operation, the ranks that
// did not answer (lost: a dead node, a cut link, a killed process) and what
// the others are doing, and aborts the job. Its first line names the lost
// ranks and their hosts, the operation (bytes, sequence number), the
// training step and the checkpoint to resume from (comm/progress.hpp). A
// process that MPI_Abort cannot end (its launcher is unreachable) exits by
// itself shortly after, so that every surviving rank has exited within
// twice the timeout.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>

namespace strata::comm::mpi {

// Starts answering liveness pings (collective over MPI_COMM_WORLD; needs
// MPI_THREAD_MULTIPLE, else the watchdog only names the operation). Called
// after MPI_Init_thread; stop_probing() before MPI_Finalize.
void start_probing();
void stop_probing();

// Registers a blocking operation with the watchdog for its lifetime.
class Watched {
 public:
  // bytes: the data the operation moves into this rank (0: none, as a barrier).
  Watched(const char* what, std::uint64_t seq, int rank, int size, double timeout_s,
          std::size_t bytes = 0);
  ~Watched();
  Watched(const Watched&) = delete;
  Watched& operator=(const Watched&) = delete;

  struct Watch {
    double start_s;  // steady clock, seconds
    double timeout_s;
    const char* what;
    std::uint64_t seq;
    int rank, size;
    std::size_t bytes;
  };

 private:
  Watch w_;
};

}  // namespace strata::comm::mpi
