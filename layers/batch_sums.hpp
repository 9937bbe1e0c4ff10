// The sums over the batch that parameter gradients take, in one place so
// that --reproducible can make them exact:
//   default:        dW += dy^T x as one GEMM, db += column sums of dy (float)
//   reproducible:   dW: the batch in chunks of ctx.exact->chunk samples, each
//                   chunk's product a fixed fma chain, added exactly into the
//                   gradient's exact twin (backends/gemm_reproducible.hpp);
//                   db and other sums of per-row terms: every term added
//                   exactly (no chunks needed).
// Exact sums do not depend on how the chunks or rows are split over ranks,
// micro-batches or threads, which is what makes a result independent of them.
// Layers call these inside backward (where Sequential sets ctx.exact).
#pragma once

#include "backends/context.hpp"
#include "backends/exact_sum.hpp"
#include "backends/launch.hpp"
#include "backends/segment_sums.hpp"

#include <cstddef>

namespace strata {

// dw (out, in) += dy^T (rows, out) x (rows, in). samples: the samples of
// the micro-batch, rows a multiple of them (positions per sample).
template <class T>
void add_weight_grad(Context& ctx, std::size_t samples, ConstMatrix<T> dy, ConstMatrix<T> x,
                     Matrix<T> dw);

// The pointer form: grad (m, n; row-major, contiguous) += op(A) (m, k)
// op(B) (k, n), where k runs over the rows of `samples` samples (k / samples
// per sample, in sample order): a convolution's patches.
template <class T>
void add_gemm_grad(Context& ctx, std::size_t samples, Op ta, Op tb, int m, int n, int k,
                   const T* A, int lda, const T* B, int ldb, T* grad);

// db (cols) += the sum over the rows of dy (rows, cols).
template <class T>
void add_column_sums(Context& ctx, ConstMatrix<T> dy, Vector<T> db);

// grad(j) += the sum over i < rows of term(i, j) (a T computed alone, for
// j < grad's size): exact term by term during a reproducible backward,
// else in double, two-stage (backends/segment_sums.hpp: neighbouring items
// take neighbouring j). For per-row terms that are no column of a matrix
// (LayerNorm's dy * xhat).
template <class T, class Term>
void add_row_sums(Context& ctx, const char* name, std::size_t rows, Vector<T> grad,
                  const Term& term);

// db(c) += the sum over the samples b and positions p of dy(b, c P + p), for
// dy (batch, C P) whose rows hold C channels of P positions each (a
// convolution's bias gradient): exact term by term during a reproducible
// backward (add_row_sums), else two-stage in double over each channel's runs
// of P values (Terms::contiguous). `partials` and `sums` name the stages.
template <class T>
void add_channel_sums(Context& ctx, const char* partials, const char* sums, ConstMatrix<T> dy,
                      std::size_t positions, Vector<T> db);

// The exact twin of a slice of the model's gradient buffer (hi, lo per
// value) during a reproducible backward; throws runtime when `grad` is not
// part of that buffer (a layer outside a model), config for double models.
template <class T>
double* exact_twin(const Context& ctx, const T* grad, std::size_t size);

// Neighbouring j per item of a reproducible add_row_sums on the host.
inline constexpr std::size_t kExactColumns = 16;

template <class T, class Term>
void add_row_sums(Context& ctx, const char* name, std::size_t rows, Vector<T> grad,
                  const Term& term) {
  if (ctx.exact != nullptr) {
    double* e = exact_twin(ctx, grad.data(), grad.extent(0));
    if constexpr (host_kernels) {
      // Host: an item per block of kExactColumns neighbouring j, walking the
      // rows in order (a row's terms of the block are neighbours in memory,
      // where one item per j walked a column of a row-major matrix: a cache
      // line per term), its splits vectorised across the block. Exact sums,
      // so the same bits as any other order.
      constexpr std::size_t kB = kExactColumns;
      const std::size_t cols = grad.extent(0);
      for_range(ctx, name, (cols + kB - 1) / kB, [=](const std::size_t blk) {
            const std::size_t j0 = blk * kB, n = cols - j0 < kB ? cols - j0 : kB;
            double hi[kB] = {}, lo[kB] = {};
            auto add_row = [&](const std::size_t i, const std::size_t width) {
              for (std::size_t c = 0; c < width; ++c) {
                double h, l;
                exact_split(static_cast<double>(term(i, j0 + c)), h, l);
                hi[c] += h;
                lo[c] += l;
              }
            };
            if (n == kB)
              for (std::size_t i = 0; i < rows; ++i) add_row(i, kB);
            else
              for (std::size_t i = 0; i < rows; ++i) add_row(i, n);
            for (std::size_t c = 0; c < n; ++c) {
              e[2 * (j0 + c)] += hi[c];
              e[2 * (j0 + c) + 1] += lo[c];
            }
          },
          rows * kB);
      return;
    }
    for_range(ctx, name, grad.extent(0), KOKKOS_LAMBDA(const std::size_t j) {
          double hi = 0, lo = 0;
          for (std::size_t i = 0; i < rows; ++i) {
            double h, l;
            exact_split(static_cast<double>(term(i, j)), h, l);
            hi += h;
            lo += l;
          }
          e[2 * j] += hi;
          e[2 * j + 1] += lo;
        },
        rows);
    return;
  }
  const std::size_t cols = grad.extent(0);
  double* work = sums_workspace(ctx, segment_sums_workspace(cols, rows, 1));
  segment_sums<1>(ctx, name, name, Terms::interleaved, cols, rows, 1, work,
      KOKKOS_LAMBDA(std::size_t j, std::size_t i, std::size_t, double* acc) {
        acc[0] += static_cast<double>(term(i, j));
      },
      KOKKOS_LAMBDA(std::size_t j, const double* total) { grad(j) += static_cast<T>(total[0]); });
}

template <class T>
void add_channel_sums(Context& ctx, const char* partials, const char* sums, ConstMatrix<T> dy,
                      std::size_t positions, Vector<T> db) {
  const std::size_t P = positions, batch = dy.extent(0), channels = db.extent(0);
  if (ctx.exact != nullptr) {  // samples, then positions, in order
    add_row_sums<T>(ctx, sums, batch * P, db, KOKKOS_LAMBDA(const std::size_t i, const std::size_t c) {
          return dy(i / P, c * P + i % P);
        });
    return;
  }
  double* work = sums_workspace(ctx, segment_sums_workspace(channels, batch * P, 1));
  segment_sums<1>(ctx, partials, sums, Terms::contiguous, channels, batch, P, work,
      KOKKOS_LAMBDA(std::size_t c, std::size_t b, std::size_t p, double* acc) {
        acc[0] += static_cast<double>(dy(b, c * P + p));
      },
      KOKKOS_LAMBDA(std::size_t c, const double* total) { db(c) += static_cast<T>(total[0]); });
}

}  // namespace strata
