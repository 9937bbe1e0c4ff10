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

#include <cstddef>

namespace strata {

// dw (out, in) += dy^T (rows, out) x (rows, in). samples: the samples of
// the micro-batch, rows a multiple of them (positions per sample).
template <class T>
void add_weight_grad(Context& ctx, std::size_t samples, ConstMatrix<T> dy, ConstMatrix<T> x,
                     Matrix<T> dw);

// db (cols) += the sum over the rows of dy (rows, cols).
template <class T>
void add_column_sums(Context& ctx, ConstMatrix<T> dy, Vector<T> db);

// The exact twin of a slice of the model's gradient buffer (hi, lo per
// value) during a reproducible backward; throws runtime when `grad` is not
// part of that buffer (a layer outside a model), config for double models.
template <class T>
double* exact_twin(const Context& ctx, const T* grad, std::size_t size);

}  // namespace strata
