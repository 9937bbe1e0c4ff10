// Communicators by name: what this build has, and which one a run uses.
//
//   self          one rank, no communication
//   threads       ranks as threads of one process (every strategy on a laptop)
//   mpi           one rank per process, started by mpirun or srun
//   hierarchical  thread ranks inside MPI processes (threads first, then MPI)
//   nccl          GPUs, device buffers (library Strata::nccl)
//
// Processes are joined by a process backend (MPI today): a table of
// functions that backends/comm/mpi.cpp fills, or backends/comm/mpi_none.cpp
// in a build without MPI. The runtime and the registry call through it, so
// no function body chooses a backend with #if.
#pragma once

#include "backends/comm/communicator.hpp"

#include <memory>
#include <string>
#include <vector>

namespace strata::comm {

// What the runtime needs of a library that joins processes.
struct ProcessBackend {
  const char* name;
  bool compiled;                              // false: this build has none
  bool (*launched)();                         // the process was started by its launcher
  void (*initialize)(int& argc, char**& argv);
  void (*finalize)();
  bool (*initialized)();
  std::unique_ptr<Communicator> (*world)();   // every process (after initialize)
  void (*abort)(int code);                    // ends every process of the job
};
const ProcessBackend& mpi_backend();

struct CommInfo {
  std::string name;
  std::string description;
  std::string unavailable;  // why a run cannot use it here; empty: it can
};

// Every communicator name, with whether a run can use it.
std::vector<CommInfo> communicators();
// "self, threads, mpi, hierarchical" (those a run can use).
std::string compiled_communicators();

// The communicator a run uses: `requested` (auto or a name) for
// `thread_ranks` ranks per process and `processes` processes. auto: mpi
// between processes, threads inside one, hierarchical for both, self for
// one rank. Throws config naming the conflict (a name this build lacks,
// threads under mpirun, mpi without it, ...).
std::string resolve_communicator(const std::string& requested, int thread_ranks, int processes);

}  // namespace strata::comm
