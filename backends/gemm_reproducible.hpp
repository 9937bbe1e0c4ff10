// The GEMM of --reproducible: every element of C is the same fused
// multiply-add chain whatever the shape, the blocking, the thread count and
// the machine,
//   acc = 0;  for p = 0 .. k-1:  acc = fma(op(A)(i, p), op(B)(p, j), acc)
//   C(i, j) = alpha * acc + beta * C(i, j)
// so a row of C does not depend on how many other rows were computed with it
// (a vendor BLAS blocks and vectorises by shape and thread count: OpenBLAS
// gives other bits for the same rows inside a taller matrix, and with 1 or 2
// threads). Threads split C, never p.
//
// gemm_exact_chunks is the same chain restarted every `chunk` values of p,
// each chunk's result added exactly (backends/exact_sum.hpp) into E: a
// weight gradient summed over chunks of the batch, which any split of the
// chunks over ranks reproduces bit for bit.
//
// Host: packed panels and a 6 x 16 register-blocked kernel (AVX2 and FMA
// where the CPU has them, checked at run time; else the same loops in plain
// C++ with std::fma, slower and bitwise equal). Device builds: the portable
// tiled kernel with explicit fma (backends/blas.hpp).
#pragma once

#include "backends/blas.hpp"

namespace strata {

template <class T>
void gemm_reproducible(const ExecSpace& exec, Op ta, Op tb, int m, int n, int k, T alpha,
                       const T* A, int lda, const T* B, int ldb, T beta, T* C, int ldc);

// The same GEMM, the same bits, on the calling thread alone: for calls from
// inside a host kernel (CausalAttention's tiles under --reproducible), where
// gemm_reproducible would start a parallel region of its own. Host builds
// (a device build throws).
template <class T>
void gemm_reproducible_here(Op ta, Op tb, int m, int n, int k, T alpha, const T* A, int lda,
                            const T* B, int ldb, T beta, T* C, int ldc);

// E(i, j) (two doubles per value, hi then lo, row stride lde values) +=
// sum over chunks c of the chain over p in [c * chunk, min((c + 1) * chunk, k)),
// added exactly (a last chunk shorter than the others is the chain a chunk
// padded with zeros would give: a padded vocabulary's rank computes it so).
void gemm_exact_chunks(const ExecSpace& exec, Op ta, Op tb, int m, int n, int k, int chunk,
                       const float* A, int lda, const float* B, int ldb, double* E, int lde);

// Which host kernel runs: "avx2+fma" or "generic" (device builds: "portable").
const char* gemm_reproducible_kernel();

}  // namespace strata
