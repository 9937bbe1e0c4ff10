// Where a rank's kernels run: the execution-space instance and the GEMM
// backend bound to it. Every layer, loss and optimizer launches through a
// Context, so that a rank (thread, process, GPU stream) owns its own.
#pragma once

#include "backends/blas.hpp"
#include "backends/kokkos.hpp"

namespace strata {

struct Context {
  Context() = default;
  explicit Context(GemmBackend gemm, ExecSpace space = ExecSpace())
      : exec(space), blas(gemm, space) {}

  ExecSpace exec;
  Blas blas;
};

}  // namespace strata
