// Process-wide runtime: initialises MPI (when launched by mpirun or srun)
// and Kokkos, and finalises in the right order; describes the build.
#pragma once

#include "backends/comm/communicator.hpp"

#include <memory>
#include <string>

namespace strata {

class Runtime {
 public:
  // Kokkos options (--kokkos-...) in argv are consumed by Kokkos. On a GPU
  // build, `device` (>= 0; a program's --device) or the node-local rank picks
  // the device before Kokkos starts (backends/device.hpp), unless argv
  // already names one (--kokkos-device-id). On a host build a device >= 0 is
  // a config error.
  Runtime(int& argc, char** argv, int device = -1);
  ~Runtime();
  // Ends the whole job at once with `code`: MPI_Abort when MPI runs (so no
  // other process waits for this one), else std::exit.
  [[noreturn]] static void abort(int code);
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;
};

// Whether this process was started by mpirun/srun and Strata was built with
// MPI (the world communicator is then MPI's).
bool launched_by_mpi();

// The processes' world: MPI_COMM_WORLD when launched by mpirun/srun (and
// built with MPI), else a one-rank communicator.
std::unique_ptr<comm::Communicator> world_communicator();

// Multi-line description: Strata version, Kokkos version and execution
// spaces, BLAS, compiled-in communicators, devices visible (GPU builds).
std::string build_info();

// One line: "Strata 0.1.0, Kokkos 3.4.1 (OpenMP), GEMM OpenBLAS"; on a GPU
// build after Kokkos started, the device too ("Kokkos 4.6.1 (Cuda, device 0:
// NVIDIA H200, ...)").
std::string build_summary();

}  // namespace strata
