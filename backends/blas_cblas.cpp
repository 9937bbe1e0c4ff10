// Vendor GEMM on the host: CBLAS (OpenBLAS, BLIS, MKL, ...). Compiled when the
// kernels' memory space is host memory and a CBLAS was found.
#include "backends/blas.hpp"

#include <cblas.h>

namespace strata::detail {

static_assert(Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible,
              "the CBLAS backend needs host-accessible kernel memory");

bool vendor_available() { return true; }

// OpenBLAS says how it was built (0 sequential, 1 its own threads, 2 OpenMP).
// With OpenMP it runs one thread inside a parallel region; with its own
// threads, calls from several threads at once would each start a team.
// Other CBLAS libraries (BLIS, MKL, ...) are not assumed to be safe.
extern "C" int openblas_get_parallel(void) __attribute__((weak));
bool vendor_sequential_in_parallel() {
  return openblas_get_parallel != nullptr && openblas_get_parallel() != 1;
}
std::string vendor_name() { return STRATA_CBLAS_NAME; }
void* vendor_create(const ExecSpace&) { return nullptr; }
void vendor_destroy(void*) {}

namespace {
CBLAS_TRANSPOSE op(Op o) { return o == Op::N ? CblasNoTrans : CblasTrans; }
}  // namespace

void vendor_gemm(void*, Op ta, Op tb, int m, int n, int k, float alpha, const float* A,
                 int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, op(ta), op(tb), m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

// No 16-bit-input GEMM: OpenBLAS's cblas_sbgemm takes bf16 arrays (and
// Debian's build does not export it); sgemm on the float operands computes
// the same products exactly.
bool vendor_gemm_16(void*, Precision, Op, Op, int, int, int, float, const float*, int,
                    const float*, int, float, float*, int) {
  return false;
}

void vendor_gemm(void*, Op ta, Op tb, int m, int n, int k, double alpha, const double* A,
                 int lda, const double* B, int ldb, double beta, double* C, int ldc) {
  cblas_dgemm(CblasRowMajor, op(ta), op(tb), m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace strata::detail
