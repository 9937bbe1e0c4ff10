#include "backends/blas.hpp"

#include "backends/error.hpp"
#include "backends/launch.hpp"

#include <type_traits>

namespace strata {

const char* to_string(GemmBackend backend) {
  return backend == GemmBackend::portable ? "portable" : "vendor";
}

Blas::Blas() : Blas(detail::vendor_available() ? GemmBackend::vendor : GemmBackend::portable) {}

Blas::Blas(GemmBackend backend, ExecSpace exec) : backend_(backend), exec_(exec) {
  if (backend_ == GemmBackend::vendor) {
    STRATA_REQUIRE(detail::vendor_available(), config,
                   "GEMM backend 'vendor' requested, but Strata was built without a vendor "
                   "BLAS for this execution space (", ExecSpace::name(), ")");
    handle_ = detail::vendor_create(exec_);
  }
}

Blas::~Blas() {
  if (handle_ != nullptr) detail::vendor_destroy(handle_);
}

std::string Blas::vendor_name() { return detail::vendor_name(); }
bool Blas::vendor_available() { return detail::vendor_available(); }

namespace {
// C = alpha op(A) op(B) + beta C as plain loops on the calling thread, for
// GEMMs too small to pay for a BLAS call or a kernel launch. Each element is
// the portable kernel's dot product in the same order, so the result is
// bitwise the portable kernel's.
template <class T>
void gemm_inline(Op ta, Op tb, int m, int n, int k, T alpha, const T* A, int lda, const T* B,
                 int ldb, T beta, T* C, int ldc) {
  const std::ptrdiff_t a_i = ta == Op::N ? lda : 1, a_p = ta == Op::N ? 1 : lda;
  const std::ptrdiff_t b_p = tb == Op::N ? ldb : 1, b_j = tb == Op::N ? 1 : ldb;
  for (int i = 0; i < m; ++i) {
    const T* a = A + i * a_i;
    T* c = C + static_cast<std::ptrdiff_t>(i) * ldc;
    for (int j = 0; j < n; ++j) {
      const T* b = B + j * b_j;
      T acc = 0;
      for (int p = 0; p < k; ++p) acc += a[p * a_p] * b[p * b_p];
      c[j] = beta == T(0) ? alpha * acc : alpha * acc + beta * c[j];
    }
  }
}
}  // namespace

bool gemm_runs_inline(int m, int n, int k) {
  if constexpr (host_kernels)
    return inline_kernels_allowed() &&
           static_cast<std::size_t>(m) * static_cast<std::size_t>(n) * static_cast<std::size_t>(k) <
               inline_gemm_limit;
  else
    return false;
}

template <class T>
void Blas::gemm(Op ta, Op tb, int m, int n, int k, T alpha, const T* A, int lda, const T* B,
                int ldb, T beta, T* C, int ldc) const {
  if (m == 0 || n == 0) return;
  if constexpr (host_kernels) {
    if (inline_small_ && gemm_runs_inline(m, n, k)) {
      gemm_inline(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
      return;
    }
  }
  if constexpr (std::is_same_v<T, float>) {
    if (backend_ == GemmBackend::vendor && float_inputs_ != Precision::fp32 &&
        detail::vendor_gemm_16(handle_, float_inputs_, ta, tb, m, n, k, alpha, A, lda, B, ldb,
                               beta, C, ldc))
      return;
  }
  if (backend_ == GemmBackend::vendor)
    detail::vendor_gemm(handle_, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
  else
    gemm_portable(exec_, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <class T>
void Blas::gemm(Op ta, Op tb, T alpha, ConstMatrix<T> A, ConstMatrix<T> B, T beta,
                Matrix<T> C) const {
  const int m = static_cast<int>(ta == Op::N ? A.extent(0) : A.extent(1));
  const int ka = static_cast<int>(ta == Op::N ? A.extent(1) : A.extent(0));
  const int kb = static_cast<int>(tb == Op::N ? B.extent(0) : B.extent(1));
  const int n = static_cast<int>(tb == Op::N ? B.extent(1) : B.extent(0));
  STRATA_REQUIRE(ka == kb && static_cast<int>(C.extent(0)) == m &&
                     static_cast<int>(C.extent(1)) == n,
                 config, "gemm: shapes do not match: op(A) is (", m, ", ", ka, "), op(B) is (",
                 kb, ", ", n, "), C is (", C.extent(0), ", ", C.extent(1), ")");
  gemm(ta, tb, m, n, ka, alpha, A.data(), static_cast<int>(A.extent(1)), B.data(),
       static_cast<int>(B.extent(1)), beta, C.data(), static_cast<int>(C.extent(1)));
}

template <class T>
void gemm_portable(const ExecSpace& exec, Op ta, Op tb, int m, int n, int k, T alpha,
                   const T* A, int lda, const T* B, int ldb, T beta, T* C, int ldc) {
  if (m == 0 || n == 0) return;
  // Strides of op(A)(i, p) and op(B)(p, j) in the row-major storage.
  const int a_i = ta == Op::N ? lda : 1, a_p = ta == Op::N ? 1 : lda;
  const int b_p = tb == Op::N ? ldb : 1, b_j = tb == Op::N ? 1 : ldb;
  // One thread per element of C; the k loop runs in a fixed order so the
  // result does not depend on the backend's scheduling.
  Kokkos::parallel_for(
      "strata::gemm_portable",
      Range2D(exec, {0, 0}, {m, n}),
      KOKKOS_LAMBDA(const int i, const int j) {
        T acc = 0;
        const T* a = A + static_cast<std::ptrdiff_t>(i) * a_i;
        const T* b = B + static_cast<std::ptrdiff_t>(j) * b_j;
        for (int p = 0; p < k; ++p) acc += a[static_cast<std::ptrdiff_t>(p) * a_p] *
                                           b[static_cast<std::ptrdiff_t>(p) * b_p];
        T& c = C[static_cast<std::ptrdiff_t>(i) * ldc + j];
        c = beta == T(0) ? alpha * acc : alpha * acc + beta * c;
      });
}

#define STRATA_INSTANTIATE_GEMM(T)                                                         \
  template void Blas::gemm<T>(Op, Op, int, int, int, T, const T*, int, const T*, int, T,  \
                              T*, int) const;                                              \
  template void Blas::gemm<T>(Op, Op, T, ConstMatrix<T>, ConstMatrix<T>, T, Matrix<T>)    \
      const;                                                                               \
  template void gemm_portable<T>(const ExecSpace&, Op, Op, int, int, int, T, const T*, int, \
                                 const T*, int, T, T*, int);
STRATA_INSTANTIATE_GEMM(float)
STRATA_INSTANTIATE_GEMM(double)
#undef STRATA_INSTANTIATE_GEMM

}  // namespace strata
