// Communicators by name: what this build has, and which one a run uses.
//
//   self          one rank, no communication
//   threads       ranks as threads of one process (every strategy on a laptop)
//   mpi           one rank per process, started by mpirun or srun
//   hierarchical  thread ranks inside MPI processes (threads first, then MPI)
//   nccl          GPUs, device buffers, one rank per process and GPU
//                 (library Strata::nccl; bootstrapped over mpi or self)
//
// Processes are joined by a process backend (MPI today): a table of
// functions that backends/comm/mpi.cpp fills, or backends/comm/mpi_none.cpp
// in a build without MPI. Devices are joined by a device backend (NCCL
// today) that a program linked with its library hands to use_device_backend.
// The runtime and the registry call through these tables, so no function
// body chooses a backend with #if.
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

// What the runtime needs of a library that joins GPUs (NCCL, RCCL).
struct DeviceBackend {
  const char* name;  // the communicator's name ("nccl")
  // Collective over `bootstrap` (every rank calls it): a communicator over
  // the same ranks on this process's current device, ordered on `stream`
  // (cudaStream_t or hipStream_t; nullptr: a stream of its own).
  std::unique_ptr<Communicator> (*create)(Communicator& bootstrap, void* stream);
};
// Makes `backend` available to resolve_communicator (a program linked with
// Strata::nccl calls use_device_backend(nccl_backend())). Not thread-safe:
// call it in main before any rank starts.
void use_device_backend(const DeviceBackend& backend);
// The device backend in use, or nullptr.
const DeviceBackend* device_backend();

struct CommInfo {
  std::string name;
  std::string description;
  std::string unavailable;  // why a run cannot use it here; empty: it can
};

// Every communicator name, with whether a run can use it.
std::vector<CommInfo> communicators();
// "self, threads, mpi, hierarchical" (those a run can use).
std::string compiled_communicators();

// What a communicator can run on here.
struct Platform {
  bool device_memory;       // kernels' memory is not host memory (CUDA, HIP)
  std::string kernels;      // the execution space ("OpenMP", "Cuda")
  bool mpi_compiled;        // this build has a process backend
  bool mpi_launched;        // and this process was started by mpirun or srun
  std::string device_comm;  // the device backend's name; empty: none
  static Platform current();
};

// The communicator a run uses: `requested` (auto or a name) for
// `thread_ranks` ranks per process and `processes` processes. auto: nccl
// between processes with one rank and one GPU each (device memory and a
// device backend), mpi between processes, threads inside one, hierarchical
// for both, self for one rank. Throws config naming the conflict (a name
// this build lacks, threads under mpirun, mpi without it, nccl on host
// memory, ...).
std::string resolve_communicator(const std::string& requested, int thread_ranks, int processes,
                                 const Platform& platform = Platform::current());

}  // namespace strata::comm
