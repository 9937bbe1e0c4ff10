// Process-wide runtime: initialises Kokkos (and, as they land, MPI and thread
// ranks) and finalises in the right order; describes the build.
#pragma once

#include <string>

namespace strata {

class Runtime {
 public:
  // Kokkos options (--kokkos-...) in argv are consumed by Kokkos.
  Runtime(int& argc, char** argv);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;
};

// Multi-line description: Strata version, Kokkos version and execution
// spaces, BLAS, compiled-in communicators.
std::string build_info();

// One line: "Strata 0.1.0, Kokkos 3.4.1 (OpenMP), GEMM OpenBLAS".
std::string build_summary();

}  // namespace strata
