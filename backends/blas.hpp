// GEMM behind one small interface.
//
// Two implementations are always reachable through Blas:
//   - portable: a Kokkos kernel that runs on any execution space; it is the
//     reference the others are tested against, and the fallback where no
//     vendor BLAS is compiled in (HIP on Debian 12, for example);
//   - vendor:   the BLAS chosen at configure time for the memory space the
//     kernels use: CBLAS (OpenBLAS, BLIS, MKL) on the host, cuBLAS on CUDA.
// Matrices are row-major with leading dimensions, in MemSpace (device memory).
#pragma once

#include "backends/kokkos.hpp"

#include <string>

namespace strata {

enum class Op { N, T };

enum class GemmBackend {
  portable,  // Kokkos kernel
  vendor,    // CBLAS / cuBLAS, as configured
};

const char* to_string(GemmBackend backend);

class Blas {
 public:
  // The vendor BLAS when one is compiled in, else the portable kernel.
  Blas();
  // Throws a config error when `backend` is vendor and none is compiled in.
  explicit Blas(GemmBackend backend, ExecSpace exec = ExecSpace());
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  GemmBackend backend() const { return backend_; }
  // Whether GEMMs below inline_gemm_limit run as plain loops (default true;
  // benchmarks switch it off to time the backend itself).
  void set_inline_small(bool on) { inline_small_ = on; }

  // C(m,n) = alpha * op(A) * op(B) + beta * C. A is (m,k) after op, B (k,n).
  // With beta == 0, C is overwritten (NaNs in C do not propagate).
  template <class T>
  void gemm(Op ta, Op tb, int m, int n, int k, T alpha, const T* A, int lda, const T* B,
            int ldb, T beta, T* C, int ldc) const;

  // View form: checks shapes, then calls the pointer form.
  template <class T>
  void gemm(Op ta, Op tb, T alpha, ConstMatrix<T> A, ConstMatrix<T> B, T beta,
            Matrix<T> C) const;

  // Name of the compiled-in vendor BLAS ("none" when there is none).
  static std::string vendor_name();
  static bool vendor_available();

 private:
  GemmBackend backend_;
  ExecSpace exec_;
  void* handle_ = nullptr;  // vendor handle (cuBLAS), owned
  bool inline_small_ = true;
};

// GEMMs of fewer multiply-adds than this run as plain loops on the calling
// thread on host back-ends, whatever the backend: a CBLAS call or a kernel
// launch costs more than they compute (the tutorial model's GEMMs have
// 320-1,600). The loops compute what the portable kernel computes, bitwise.
inline constexpr std::size_t inline_gemm_limit = 4096;
// Whether Blas::gemm runs an (m, n, k) GEMM inline.
bool gemm_runs_inline(int m, int n, int k);

// The portable Kokkos GEMM on its own (used by Blas and by tests).
template <class T>
void gemm_portable(const ExecSpace& exec, Op ta, Op tb, int m, int n, int k, T alpha,
                   const T* A, int lda, const T* B, int ldb, T beta, T* C, int ldc);

namespace detail {
// Implemented by exactly one of blas_cblas.cpp, blas_cublas.cpp, blas_none.cpp.
bool vendor_available();
std::string vendor_name();
void* vendor_create(const ExecSpace& exec);
void vendor_destroy(void* handle);
void vendor_gemm(void* handle, Op ta, Op tb, int m, int n, int k, float alpha, const float* A,
                 int lda, const float* B, int ldb, float beta, float* C, int ldc);
void vendor_gemm(void* handle, Op ta, Op tb, int m, int n, int k, double alpha,
                 const double* A, int lda, const double* B, int ldb, double beta, double* C,
                 int ldc);
}  // namespace detail

}  // namespace strata
