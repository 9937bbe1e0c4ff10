// --reproducible: training whose losses, parameters, optimizer state and
// checkpoints are the same bits on any number of ranks (thread ranks, MPI
// processes, hierarchical), any strategy and any number of threads per rank.
//
// How (docs/design-notes.md, "Bitwise reproducibility"):
//   - every GEMM runs one fixed fused multiply-add chain per element
//     (backends/gemm_reproducible.hpp), so a sample's activations do not
//     depend on the other samples computed with it, nor on threads;
//   - every sum over the batch (weight gradients, biases, the loss, the
//     gradient norm) is exact (backends/exact_sum.hpp): weight gradients in
//     chunks of `chunk` samples of the global batch, each chunk a fixed chain,
//     added exactly; sums of per-sample terms term by term;
//   - gradients travel between ranks as exact sums, which any allreduce adds
//     exactly, in any order.
//   - with tensor parallelism, the sums it splits over ranks (a Linear's
//     input features in forward, its output features for the input gradient,
//     the softmax of a vocabulary-parallel loss) are exact too: every Linear
//     whose width the tensor chunk (--tp-chunk) divides sums it in chunks of
//     that many features, each a fixed chain, added exactly
//     (Layer::set_inner_chunk), and the ranks add the pairs before rounding.
// What must stay equal between two runs: the global batch, the chunk, the
// tensor chunk, the data order (seed), the precision, the model and
// optimizer options. What may change: ranks, threads per rank, the strategy
// (tensor parallelism needs the tensor chunk), the GEMM backend.
#pragma once

#include "backends/context.hpp"

#include <cstddef>
#include <string>

namespace strata {

// Samples per chunk when --reproducible is given without --chunk.
inline constexpr std::size_t default_chunk = 32;

// Throws config unless every rank's shard of a global batch of `batch`
// samples over `ranks` data-parallel ranks (BatchLoader::shard), and each of
// its `micro` micro-batches, is whole chunks; the message names the shards
// and the batch sizes that would be.
void validate_reproducible(std::size_t chunk, std::size_t batch, int ranks, std::size_t micro = 1);

// Puts a rank's context into reproducible arithmetic (ctx.reproducible and
// the fixed-order GEMM).
void enable_reproducible(Context& ctx);

// ", reproducible (chunks of N samples[, tensor chunks of S features])" for
// an engine's banner; "" when chunk is 0.
std::string describe_reproducible(std::size_t chunk, std::size_t tp_chunk);

}  // namespace strata
