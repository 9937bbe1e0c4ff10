// The GEMMs of a model's training step and a per-layer timing of one step,
// for strata-bench-train (W4, the CNN).
//
// step_gemms: every GEMM a step of `batch` samples performs, as the single
// GEMM of the whole batch (Linear: y = x W^T, dW += dy^T x, dx = dy W;
// Conv2d per group: y(O, B P) = W col(C K, B P), dW += dy col^T,
// dcol = W^T dy; CausalAttention per sample and head: q k^T, P v, and the
// four of backward; blocks: their inner layers'), without the input gradient of layer 0 (the model input's:
// nobody needs it). The sgemm reference of a workload times exactly these.
//
// layer_breakdown: each layer of a built model alone on a batch of seeded
// values, median of repetitions: forward, backward-data (backward minus a
// backward without input gradient) and backward-weights, in ms; for Conv2d
// and Linear also GFLOP/s of each part and its fraction of the rate of the
// same GEMM shape timed alone just before (so that im2col, col2im and the
// layout copies show as the gap to 100%).
#pragma once

#include "backends/blas.hpp"
#include "backends/context.hpp"
#include "layers/sequential.hpp"

#include <cstdio>
#include <string>
#include <vector>

namespace strata::bench {

struct GemmShape {
  Op ta, tb;
  int m, n, k;
  std::string what;  // "conv1 forward", ...
  // Independent GEMMs of this shape (attention: one per sample and head),
  // which the layer and the reference run one per host thread at a time on
  // the sequential BLAS where the build allows (Blas::sequential_in_kernels).
  int count = 1;
  double flops() const { return 2.0 * m * n * k * count; }
};

std::vector<GemmShape> step_gemms(const Sequential<float>& model, std::size_t batch);

// GFLOP/s of `shapes` run back to back on ctx's threads with the vendor BLAS
// (the reproducible GEMM when ctx.blas is set to it)
// (matrices allocated and touched first; each repetition at least 20 ms;
// median of `reps`).
double gemm_rate(const std::vector<GemmShape>& shapes, Context& ctx, int reps = 5);

// One GEMM part of a layer in the table: its rate against its shapes'.
struct GemmPart {
  std::string layer, type, part;  // "conv2", "Conv2d(32, 64, ...)", "forward"
  double seconds = 0, fraction = 0;  // of the sgemm rate of the same shapes
  double flops = 0;                   // of its GEMMs
  bool alternative = false;          // a row of an algorithm the step does not use
};

// Prints the per-layer table of `model` (built for `batch`) to stdout; the
// GEMM parts' rates into *parts when given.
void layer_breakdown(Sequential<float>& model, std::size_t batch, Context& ctx, int reps,
                     const std::string& workload, std::vector<GemmPart>* parts = nullptr);

}  // namespace strata::bench
