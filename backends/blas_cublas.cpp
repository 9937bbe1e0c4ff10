// Vendor GEMM on NVIDIA GPUs: cuBLAS, on the stream of the execution-space
// instance so that it is ordered with Strata's Kokkos kernels.
#include "backends/blas.hpp"
#include "backends/error.hpp"

#include <cublas_v2.h>

namespace strata::detail {

static_assert(std::is_same<ExecSpace, Kokkos::Cuda>::value,
              "the cuBLAS backend needs Kokkos::Cuda as the default execution space");

namespace {
void check(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  if (status == CUBLAS_STATUS_NOT_INITIALIZED)
    STRATA_THROW(runtime, what, " failed: cuBLAS could not initialise (no CUDA device?)");
  STRATA_THROW(runtime, what, " failed with cuBLAS status ", static_cast<int>(status));
}
cublasOperation_t op(Op o) { return o == Op::N ? CUBLAS_OP_N : CUBLAS_OP_T; }
}  // namespace

bool vendor_available() { return true; }
bool vendor_sequential_in_parallel() { return false; }  // device kernels call no BLAS
std::string vendor_name() { return "cuBLAS"; }

void* vendor_create(const ExecSpace& exec) {
  cublasHandle_t handle = nullptr;
  check(cublasCreate(&handle), "cublasCreate");
  check(cublasSetStream(handle, exec.cuda_stream()), "cublasSetStream");
  return handle;
}

void vendor_destroy(void* handle) { cublasDestroy(static_cast<cublasHandle_t>(handle)); }

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the
// operands and the dimensions m and n.
void vendor_gemm(void* handle, Op ta, Op tb, int m, int n, int k, float alpha, const float* A,
                 int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  check(cublasSgemm(static_cast<cublasHandle_t>(handle), op(tb), op(ta), n, m, k, &alpha, B,
                    ldb, A, lda, &beta, C, ldc),
        "cublasSgemm");
}

// Operands holding bf16 (fp16) values: tensor cores with fp32 accumulation.
// The FAST_16BF/_16F compute types let cuBLAS convert float operands to
// bf16/fp16 (or TF32), which is exact for such values. Compile-checked here;
// scripts/gpu-check.sh runs GemmShapes.VendorWith16BitInputsMatchesReference
// on a GPU.
bool vendor_gemm_16(void* handle, Precision inputs, Op ta, Op tb, int m, int n, int k,
                    float alpha, const float* A, int lda, const float* B, int ldb, float beta,
                    float* C, int ldc) {
  const cublasComputeType_t compute =
      inputs == Precision::bf16 ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F_FAST_16F;
  check(cublasGemmEx(static_cast<cublasHandle_t>(handle), op(tb), op(ta), n, m, k, &alpha, B,
                     CUDA_R_32F, ldb, A, CUDA_R_32F, lda, &beta, C, CUDA_R_32F, ldc, compute,
                     CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx (16-bit inputs)");
  return true;
}

void vendor_gemm(void* handle, Op ta, Op tb, int m, int n, int k, double alpha,
                 const double* A, int lda, const double* B, int ldb, double beta, double* C,
                 int ldc) {
  check(cublasDgemm(static_cast<cublasHandle_t>(handle), op(tb), op(ta), n, m, k, &alpha, B,
                    ldb, A, lda, &beta, C, ldc),
        "cublasDgemm");
}

}  // namespace strata::detail
