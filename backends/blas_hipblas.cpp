// Vendor GEMM on AMD GPUs: hipBLAS (rocBLAS underneath), on the stream of the
// execution-space instance so that it is ordered with Strata's Kokkos kernels.
// Compile-checked against hipBLAS's headers; never run (no AMD GPU here).
#include "backends/blas.hpp"
#include "backends/error.hpp"

// From ROCm 5.2 on the header is include/hipblas/hipblas.h (6.0 drops the old
// include/hipblas.h); ROCm 5.0-5.1 install hipblas/include/hipblas.h, which the
// roc::hipblas target puts on the include path.
#if __has_include(<hipblas/hipblas.h>)
#include <hipblas/hipblas.h>
#else
#include <hipblas.h>
#endif

#include <type_traits>

namespace strata::detail {

#if KOKKOS_VERSION >= 40000
static_assert(std::is_same<ExecSpace, Kokkos::HIP>::value,
              "the hipBLAS backend needs Kokkos::HIP as the default execution space");
#else
static_assert(std::is_same<ExecSpace, Kokkos::Experimental::HIP>::value,
              "the hipBLAS backend needs Kokkos::Experimental::HIP as the default execution space");
#endif

namespace {
void check(hipblasStatus_t status, const char* what) {
  if (status == HIPBLAS_STATUS_SUCCESS) return;
  if (status == HIPBLAS_STATUS_NOT_INITIALIZED)
    STRATA_THROW(runtime, what, " failed: hipBLAS could not initialise (no HIP device?)");
  STRATA_THROW(runtime, what, " failed with hipBLAS status ", static_cast<int>(status), " (",
               hipblasStatusToString(status), ")");
}
hipblasOperation_t op(Op o) { return o == Op::N ? HIPBLAS_OP_N : HIPBLAS_OP_T; }
}  // namespace

bool vendor_available() { return true; }
bool vendor_sequential_in_parallel() { return false; }  // device kernels call no BLAS
std::string vendor_name() { return "hipBLAS"; }

void* vendor_create(const ExecSpace& exec) {
  hipblasHandle_t handle = nullptr;
  check(hipblasCreate(&handle), "hipblasCreate");
  check(hipblasSetStream(handle, exec.hip_stream()), "hipblasSetStream");
  return handle;
}

void vendor_destroy(void* handle) { hipblasDestroy(static_cast<hipblasHandle_t>(handle)); }

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the
// operands and the dimensions m and n.
void vendor_gemm(void* handle, Op ta, Op tb, int m, int n, int k, float alpha, const float* A,
                 int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  check(hipblasSgemm(static_cast<hipblasHandle_t>(handle), op(tb), op(ta), n, m, k, &alpha, B,
                     ldb, A, lda, &beta, C, ldc),
        "hipblasSgemm");
}

// No 16-bit-input path: hipBLAS declares HIPBLAS_COMPUTE_32F_FAST_16BF/_16F
// (2.x), but on AMD GPUs it runs float operands only with
// HIPBLAS_COMPUTE_32F and answers HIPBLAS_STATUS_NOT_SUPPORTED otherwise, and
// its bf16/fp16 GEMMs read 16-bit buffers, not float ones. The caller then
// runs the fp32 GEMM on the same values: what a 16-bit-input GEMM with fp32
// accumulation computes, up to summation order.
bool vendor_gemm_16(void*, Precision, Op, Op, int, int, int, float, const float*, int,
                    const float*, int, float, float*, int) {
  return false;
}

void vendor_gemm(void* handle, Op ta, Op tb, int m, int n, int k, double alpha,
                 const double* A, int lda, const double* B, int ldb, double beta, double* C,
                 int ldc) {
  check(hipblasDgemm(static_cast<hipblasHandle_t>(handle), op(tb), op(ta), n, m, k, &alpha, B,
                     ldb, A, lda, &beta, C, ldc),
        "hipblasDgemm");
}

}  // namespace strata::detail
