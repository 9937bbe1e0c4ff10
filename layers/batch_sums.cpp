#include "layers/batch_sums.hpp"

#include "backends/error.hpp"
#include "backends/gemm_reproducible.hpp"
#include "backends/launch.hpp"

#include <algorithm>
#include <type_traits>
#include <vector>

namespace strata {

namespace {
// db(j) += sum over rows of dy(i, j). On the host rows in order, in blocks
// of column_block_rows rows summed in float (vectorised, 8 per instruction)
// whose sums are added in double: a float sum of at most 32 values, so
// thousands of rows (B T in a transformer) do not drift as one float sum
// does, at the speed of float adds. On a device two-stage in double
// (backends/segment_sums.hpp: one item per column left a GPU idle).
constexpr std::size_t column_block_rows = 32;

template <class T>
void plain_column_sums(Context& ctx, ConstMatrix<T> dy, Vector<T> db) {
  const std::size_t rows = dy.extent(0), cols = dy.extent(1);
  if constexpr (host_kernels) {
    if (runs_inline(ctx, rows * cols)) {
      // On the calling thread: row by row (contiguous, vectorised) into one
      // accumulator per column instead of column by column (a stride of a
      // whole row per read). Each column adds the same values in the same
      // order as the kernel below, so the result is the same, bit for bit.
      thread_local std::vector<T> block;
      thread_local std::vector<double> acc;
      block.assign(cols, T(0));
      acc.assign(cols, 0.0);
      T* a = block.data();
      for (std::size_t i0 = 0; i0 < rows; i0 += column_block_rows) {
        const std::size_t i1 = std::min(rows, i0 + column_block_rows);
        for (std::size_t j = 0; j < cols; ++j) a[j] = T(0);
        for (std::size_t i = i0; i < i1; ++i) {
          const T* r = dy.data() + i * dy.stride(0);
          STRATA_IVDEP
          for (std::size_t j = 0; j < cols; ++j) a[j] += r[j];
        }
        for (std::size_t j = 0; j < cols; ++j) acc[j] += static_cast<double>(a[j]);
      }
      for (std::size_t j = 0; j < cols; ++j) db(j) += static_cast<T>(acc[j]);
      return;
    }
    // On host threads: blocks of 64 columns, each summed row by row on one
    // thread (a column per thread reads a whole row apart for every value:
    // 7% of a transformer step, where B T rows of 1024 columns are summed).
    constexpr std::size_t block = 64;
    for_host_items(ctx, "strata::Linear::bias_grad", (cols + block - 1) / block,
                   [=](const std::size_t b) {
                     const std::size_t c0 = b * block, n = std::min(block, cols - c0);
                     double acc[block] = {};
                     for (std::size_t i0 = 0; i0 < rows; i0 += column_block_rows) {
                       const std::size_t i1 = std::min(rows, i0 + column_block_rows);
                       T a[block] = {};
                       for (std::size_t i = i0; i < i1; ++i) {
                         const T* r = dy.data() + i * dy.stride(0) + c0;
                         STRATA_IVDEP
                         for (std::size_t j = 0; j < n; ++j) a[j] += r[j];
                       }
                       for (std::size_t j = 0; j < n; ++j) acc[j] += static_cast<double>(a[j]);
                     }
                     for (std::size_t j = 0; j < n; ++j) db(c0 + j) += static_cast<T>(acc[j]);
                   },
                   rows * block);
    return;
  }
  double* work = sums_workspace(ctx, segment_sums_workspace(cols, rows, 1));
  segment_sums<1>(ctx, "strata::Linear::bias_grad_partials", "strata::Linear::bias_grad",
      Terms::interleaved, cols, rows, 1, work,
      KOKKOS_LAMBDA(std::size_t j, std::size_t i, std::size_t, double* acc) {
        acc[0] += static_cast<double>(dy(i, j));
      },
      KOKKOS_LAMBDA(std::size_t j, const double* total) { db(j) += static_cast<T>(total[0]); });
}

}  // namespace

template <class T>
double* exact_twin(const Context& ctx, const T* grad, std::size_t size) {
  STRATA_REQUIRE((std::is_same_v<T, float>), config,
                 "--reproducible trains float models (exact sums of double values need more "
                 "than two doubles)");
  const ExactGradients& e = *ctx.exact;
  const T* base = static_cast<const T*>(e.grads);
  STRATA_REQUIRE(grad >= base && grad + size <= base + e.size, runtime,
                 "reproducible backward: a gradient of ", size,
                 " values outside the model's gradient buffer");
  return e.exact + 2 * static_cast<std::size_t>(grad - base);
}

template <class T>
void add_gemm_grad(Context& ctx, std::size_t samples, Op ta, Op tb, int m, int n, int k,
                   const T* A, int lda, const T* B, int ldb, T* grad) {
  if (ctx.exact == nullptr) {
    ctx.blas.gemm(ta, tb, m, n, k, T(1), A, lda, B, ldb, T(1), grad, n);
    return;
  }
  const std::size_t rows = static_cast<std::size_t>(k), chunk = ctx.exact->chunk;
  STRATA_REQUIRE(samples > 0 && rows % samples == 0 && samples % chunk == 0, config,
                 "--reproducible: a micro-batch of ", samples,
                 " samples is not whole chunks of ", chunk, " (--chunk)");
  double* e = exact_twin(ctx, grad, static_cast<std::size_t>(m) * n);
  if constexpr (std::is_same_v<T, float>)
    gemm_exact_chunks(ctx.exec, ta, tb, m, n, k, static_cast<int>(rows / samples * chunk), A, lda,
                      B, ldb, e, n);
}

template <class T>
void add_weight_grad(Context& ctx, std::size_t samples, ConstMatrix<T> dy, ConstMatrix<T> x,
                     Matrix<T> dw) {
  STRATA_REQUIRE(dw.span_is_contiguous() && dy.extent(1) == dw.extent(0) &&
                     x.extent(1) == dw.extent(1) && x.extent(0) == dy.extent(0),
                 config, "add_weight_grad: shapes do not match: dy (", dy.extent(0), ", ",
                 dy.extent(1), "), x (", x.extent(0), ", ", x.extent(1), "), dW (", dw.extent(0),
                 ", ", dw.extent(1), ")");
  add_gemm_grad<T>(ctx, samples, Op::T, Op::N, static_cast<int>(dw.extent(0)),
                   static_cast<int>(dw.extent(1)), static_cast<int>(dy.extent(0)), dy.data(),
                   static_cast<int>(dy.stride(0)), x.data(), static_cast<int>(x.stride(0)),
                   dw.data());
}

template <class T>
void add_column_sums(Context& ctx, ConstMatrix<T> dy, Vector<T> db) {
  if (ctx.exact == nullptr) {
    plain_column_sums(ctx, dy, db);
    return;
  }
  // Every row's value added exactly (so the rows may be split any way:
  // over threads here, over ranks by the caller).
  add_row_sums<T>(ctx, "strata::exact_column_sums", dy.extent(0), db,
      KOKKOS_LAMBDA(const std::size_t i, const std::size_t j) { return dy(i, j); });
}

template void add_gemm_grad<float>(Context&, std::size_t, Op, Op, int, int, int, const float*, int,
                                   const float*, int, float*);
template void add_gemm_grad<double>(Context&, std::size_t, Op, Op, int, int, int, const double*,
                                    int, const double*, int, double*);
template void add_weight_grad<float>(Context&, std::size_t, ConstMatrix<float>, ConstMatrix<float>,
                                     Matrix<float>);
template void add_weight_grad<double>(Context&, std::size_t, ConstMatrix<double>,
                                      ConstMatrix<double>, Matrix<double>);
template void add_column_sums<float>(Context&, ConstMatrix<float>, Vector<float>);
template void add_column_sums<double>(Context&, ConstMatrix<double>, Vector<double>);
template double* exact_twin<float>(const Context&, const float*, std::size_t);
template double* exact_twin<double>(const Context&, const double*, std::size_t);

}  // namespace strata
