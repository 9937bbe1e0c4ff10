// GEMM behind one small interface.
//
// Two implementations are always reachable through Blas:
//   - portable: a Kokkos kernel that runs on any execution space; it is the
//     reference the others are tested against, and the fallback where no
//     vendor BLAS is compiled in (HIP without hipBLAS, as on Debian 12);
//   - vendor:   the BLAS chosen at configure time for the memory space the
//     kernels use: CBLAS (OpenBLAS, BLIS, MKL) on the host, cuBLAS on CUDA,
//     hipBLAS on HIP.
// Matrices are row-major with leading dimensions, in MemSpace (device memory).
#pragma once

#include "backends/kokkos.hpp"
#include "backends/precision.hpp"

#include <string>

namespace strata {

enum class Op { N, T };

enum class GemmBackend {
  portable,  // Kokkos kernel
  vendor,    // CBLAS / cuBLAS / hipBLAS, as configured
};

const char* to_string(GemmBackend backend);
// "portable" or "vendor"; throws config naming `option` and the choices.
GemmBackend parse_gemm_backend(const std::string& name, const char* option = "--gemm");

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
  // The reproducible GEMM (backends/gemm_reproducible.hpp) for every call,
  // whatever the backend: a fixed fused multiply-add chain per element
  // (--reproducible). Off by default.
  void set_reproducible(bool on) { reproducible_ = on; }
  bool reproducible() const { return reproducible_; }
  // Declares that the operands of the float GEMMs that follow hold values of
  // precision p (bf16 or fp16 values in float buffers, as mixed precision
  // keeps them), so that a vendor BLAS with a 16-bit-input GEMM may use it:
  // cuBLAS runs cublasGemmEx with CUBLAS_COMPUTE_32F_FAST_16BF/_16F (tensor
  // cores, fp32 accumulation; the conversion of such operands is exact, so
  // the result is the fp32 GEMM's up to summation order). CBLAS, hipBLAS and
  // the portable kernel compute in float as before. fp32 (the default): none.
  void set_float_inputs(Precision p) { float_inputs_ = p; }
  Precision float_inputs() const { return float_inputs_; }

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
  // Whether this Blas may be called from inside a host kernel, each call
  // running sequentially on its calling thread: the vendor backend of a host
  // build whose kernels run on OpenMP (or Serial) threads, with a CBLAS known
  // to run sequentially there (OpenBLAS built sequential or with OpenMP,
  // which runs one thread inside a parallel region). Layers use it to give
  // each thread its own samples and small GEMMs (Conv2d).
  bool sequential_in_kernels() const {
    return !reproducible_ && backend_ == GemmBackend::vendor && vendor_sequential_in_kernels();
  }
  // The same for this build's vendor backend.
  static bool vendor_sequential_in_kernels();
  // Whether gemm_in_kernel may be called from inside a host kernel: where
  // sequential_in_kernels() holds, or with set_reproducible in a host build
  // (the reproducible kernel then runs on the calling thread).
  bool gemm_in_kernels() const;
  // gemm, from inside a host kernel, on the calling thread alone (needs
  // gemm_in_kernels()): the same bits as gemm would give.
  template <class T>
  void gemm_in_kernel(Op ta, Op tb, int m, int n, int k, T alpha, const T* A, int lda, const T* B,
                      int ldb, T beta, T* C, int ldc) const;

 private:
  GemmBackend backend_;
  ExecSpace exec_;
  void* handle_ = nullptr;  // vendor handle (cuBLAS, hipBLAS), owned
  bool inline_small_ = true;
  bool reproducible_ = false;
  Precision float_inputs_ = Precision::fp32;
};

// Blas::set_float_inputs(p) for a scope, then the previous value again.
class ScopedFloatInputs {
 public:
  ScopedFloatInputs(Blas& blas, Precision p) : blas_(blas), previous_(blas.float_inputs()) {
    blas.set_float_inputs(p);
  }
  ~ScopedFloatInputs() { blas_.set_float_inputs(previous_); }
  ScopedFloatInputs(const ScopedFloatInputs&) = delete;
  ScopedFloatInputs& operator=(const ScopedFloatInputs&) = delete;

 private:
  Blas& blas_;
  Precision previous_;
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

// The same kernel with every step of the chain fma(a, b, acc), rounded once:
// the reproducible GEMM on devices (backends/gemm_reproducible.hpp).
template <class T>
void gemm_portable_fused(const ExecSpace& exec, Op ta, Op tb, int m, int n, int k, T alpha,
                         const T* A, int lda, const T* B, int ldb, T beta, T* C, int ldc);

namespace detail {
// Implemented by exactly one of blas_cblas.cpp, blas_cublas.cpp, blas_hipblas.cpp,
// blas_none.cpp.
bool vendor_available();
// Whether a vendor GEMM called inside an OpenMP parallel region runs on the
// calling thread alone (see Blas::sequential_in_kernels).
bool vendor_sequential_in_parallel();
std::string vendor_name();
void* vendor_create(const ExecSpace& exec);
void vendor_destroy(void* handle);
void vendor_gemm(void* handle, Op ta, Op tb, int m, int n, int k, float alpha, const float* A,
                 int lda, const float* B, int ldb, float beta, float* C, int ldc);
// A float GEMM whose operands hold values of `inputs` (bf16 or fp16) on the
// vendor's 16-bit-input GEMM; false (nothing done) where it has none.
bool vendor_gemm_16(void* handle, Precision inputs, Op ta, Op tb, int m, int n, int k,
                    float alpha, const float* A, int lda, const float* B, int ldb, float beta,
                    float* C, int ldc);
void vendor_gemm(void* handle, Op ta, Op tb, int m, int n, int k, double alpha,
                 const double* A, int lda, const double* B, int ldb, double beta, double* C,
                 int ldc);
}  // namespace detail

}  // namespace strata
