// Where a rank's kernels run: the execution-space instance and the GEMM
// backend bound to it. Every layer, loss and optimizer launches through a
// Context, so that a rank (thread, process, GPU stream) owns its own.
#pragma once

#include "backends/blas.hpp"
#include "backends/kokkos.hpp"

#include <cstddef>

namespace strata {

// --reproducible, during a backward pass (Sequential::backward sets it):
// where layers add their parameter gradients exactly (layers/batch_sums.hpp).
struct ExactGradients {
  const void* grads = nullptr;  // the model's flat gradient buffer
  double* exact = nullptr;      // its exact twin: hi, lo per value (backends/exact_sum.hpp)
  std::size_t size = 0;         // values of both
  std::size_t chunk = 0;        // samples per chunk of the batch
};

struct Context {
  Context();
  explicit Context(GemmBackend gemm, ExecSpace space = ExecSpace());

  ExecSpace exec;
  Blas blas;
  // Threads a kernel launched on `exec` runs on (the calling thread rank's
  // share of the pool on the host; the device's concurrency otherwise).
  int threads = 1;
  // Whether small host kernels may run inline (backends/launch.hpp).
  bool inline_ok = true;
  // --reproducible: sums that may be split over ranks or threads are exact
  // (backends/exact_sum.hpp) and GEMMs run the fixed-order kernel
  // (blas.set_reproducible). Set by the engine, with blas.
  bool reproducible = false;
  const ExactGradients* exact = nullptr;
  // The partial sums of segment_sums (backends/segment_sums.hpp) for layers
  // that keep no workspace of their own: grown on demand, reused by every
  // launch on `exec` (in stream order, so one at a time).
  Kokkos::View<double*, MemSpace> sums_workspace;
};

// Threads a kernel launched on `exec` from the calling thread runs on.
int kernel_threads(const ExecSpace& exec);

// Whether small host kernels may run inline at all: not when a Kokkos tool is
// loaded (it is to see every kernel) nor with STRATA_INLINE_KERNELS=0.
bool inline_kernels_allowed();

}  // namespace strata
