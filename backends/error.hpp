// Errors and contracts for Strata: the host errors (backends/host_error.hpp)
// and STRATA_EXPECT, the contract macro for preconditions: checked in debug
// builds, compiled out with NDEBUG, and safe inside kernels.
#pragma once

#include "backends/host_error.hpp"

#include <Kokkos_Core.hpp>

// Contract for preconditions; usable in kernels; compiled out with NDEBUG.
#ifdef NDEBUG
#define STRATA_EXPECT(cond) ((void)0)
#else
#define STRATA_EXPECT(cond)                                                 \
  do {                                                                      \
    if (!(cond)) Kokkos::abort("strata: contract violated: " #cond);        \
  } while (0)
#endif
