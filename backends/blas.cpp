#include "backends/blas.hpp"

#include "backends/error.hpp"
#include "backends/gemm_reproducible.hpp"
#include "backends/launch.hpp"

#include <type_traits>

namespace strata {

const char* to_string(GemmBackend backend) {
  return backend == GemmBackend::portable ? "portable" : "vendor";
}

GemmBackend parse_gemm_backend(const std::string& name, const char* option) {
  if (name == "portable") return GemmBackend::portable;
  if (name == "vendor") return GemmBackend::vendor;
  STRATA_THROW(config, option, ": unknown value '", name, "' (expected auto, vendor or portable)");
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

bool Blas::vendor_sequential_in_kernels() {
  if constexpr (!host_kernels) {
    return false;
  } else {
#ifdef KOKKOS_ENABLE_OPENMP
    constexpr bool openmp = std::is_same_v<ExecSpace, Kokkos::OpenMP>;
#else
    constexpr bool openmp = false;
#endif
#ifdef KOKKOS_ENABLE_SERIAL
    constexpr bool serial = std::is_same_v<ExecSpace, Kokkos::Serial>;
#else
    constexpr bool serial = false;
#endif
    return (openmp || serial) && detail::vendor_available() &&
           detail::vendor_sequential_in_parallel();
  }
}

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
  if (reproducible_) {
    gemm_reproducible(exec_, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
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

bool Blas::gemm_in_kernels() const {
  return sequential_in_kernels() || (reproducible_ && host_kernels);
}

template <class T>
void Blas::gemm_in_kernel(Op ta, Op tb, int m, int n, int k, T alpha, const T* A, int lda,
                          const T* B, int ldb, T beta, T* C, int ldc) const {
  if (reproducible_)
    gemm_reproducible_here(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
  else  // the vendor's, sequential here (sequential_in_kernels), or the inline loops
    gemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
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

// The portable GEMM, tiled: each team computes a kTm x kTn tile of C,
// walking k in blocks of kTk whose panels of op(A) and op(B) it first copies
// into team scratch memory (shared memory on a GPU, L1-sized on the host).
// Every element of C still sums its products in the order p = 0, 1, ..., k-1
// (acc += a * b), so the result is the one-loop dot product's, bitwise:
// independent of the tiling, the backend's scheduling and the team size.
//   GPU:  teams of (kTm / kR) x (kTn / kR) threads; each thread keeps a
//         kR x kR block of C in registers.
//   host: teams of one thread, which keeps the tile in scratch and updates
//         it row by row (contiguous, vectorisable loops).
namespace {
constexpr int kTm = 64, kTn = 64, kTk = 16, kR = 4;
}  // namespace

namespace {
// Fused: each step of the chain is fma(a, b, acc), rounded once (the
// reproducible GEMM's arithmetic); else acc + a * b, rounded twice on every
// target (the build turns contraction off: backends/floating_point.hpp).
template <class T, bool Fused>
KOKKOS_INLINE_FUNCTION T chain_step(T a, T b, T acc) {
  if constexpr (Fused) return kmath::fma(a, b, acc);
  else return acc + a * b;
}

template <class T, bool Fused>
void gemm_tiled(const ExecSpace& exec, Op ta, Op tb, int m, int n, int k, T alpha, const T* A,
                int lda, const T* B, int ldb, T beta, T* C, int ldc) {
  if (m == 0 || n == 0) return;
  // Strides of op(A)(i, p) and op(B)(p, j) in the row-major storage.
  const std::ptrdiff_t a_i = ta == Op::N ? lda : 1, a_p = ta == Op::N ? 1 : lda;
  const std::ptrdiff_t b_p = tb == Op::N ? ldb : 1, b_j = tb == Op::N ? 1 : ldb;
  const int tiles_n = (n + kTn - 1) / kTn, tiles = ((m + kTm - 1) / kTm) * tiles_n;
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = typename Policy::member_type;
  using Panel = Kokkos::View<T**, Kokkos::LayoutRight, typename ExecSpace::scratch_memory_space,
                             Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  constexpr bool host = host_kernels;
  const int team = host ? 1 : (kTm / kR) * (kTn / kR);
  // Panels as (p, i) and (p, j); on the host also the tile's sums (i, j).
  const std::size_t scratch = Panel::shmem_size(kTk, kTm) + Panel::shmem_size(kTk, kTn) +
                              (host ? Panel::shmem_size(kTm, kTn) : 0);
  const Policy policy = Policy(exec, tiles, team).set_scratch_size(0, Kokkos::PerTeam(scratch));
  // Two kernels, not one with `if constexpr` inside: nvcc refuses a device
  // lambda that first captures a variable in a constexpr-if branch.
  if constexpr (host) {
    Kokkos::parallel_for(
        "strata::gemm_portable", policy, KOKKOS_LAMBDA(const Member& t) {
          const int i0 = (t.league_rank() / tiles_n) * kTm, j0 = (t.league_rank() % tiles_n) * kTn;
          const int tm = m - i0 < kTm ? m - i0 : kTm, tn = n - j0 < kTn ? n - j0 : kTn;
          Panel as(t.team_scratch(0), kTk, kTm), bs(t.team_scratch(0), kTk, kTn);
          Panel acc(t.team_scratch(0), kTm, kTn);
          for (int i = 0; i < tm; ++i)
            for (int j = 0; j < tn; ++j) acc(i, j) = T(0);
          for (int k0 = 0; k0 < k; k0 += kTk) {
            const int tk = k - k0 < kTk ? k - k0 : kTk;
            for (int p = 0; p < tk; ++p) {
              const T* a = A + (k0 + p) * a_p + i0 * a_i;
              const T* b = B + (k0 + p) * b_p + j0 * b_j;
              for (int i = 0; i < tm; ++i) as(p, i) = a[i * a_i];
              for (int j = 0; j < tn; ++j) bs(p, j) = b[j * b_j];
            }
            // Four rows at a time share each load of b.
            int i = 0;
            for (; i + 4 <= tm; i += 4) {
              T *r0 = &acc(i, 0), *r1 = &acc(i + 1, 0), *r2 = &acc(i + 2, 0), *r3 = &acc(i + 3, 0);
              for (int p = 0; p < tk; ++p) {
                const T a0 = as(p, i), a1 = as(p, i + 1), a2 = as(p, i + 2), a3 = as(p, i + 3);
                const T* b = &bs(p, 0);
                STRATA_IVDEP
                for (int j = 0; j < tn; ++j) {
                  r0[j] = chain_step<T, Fused>(a0, b[j], r0[j]);
                  r1[j] = chain_step<T, Fused>(a1, b[j], r1[j]);
                  r2[j] = chain_step<T, Fused>(a2, b[j], r2[j]);
                  r3[j] = chain_step<T, Fused>(a3, b[j], r3[j]);
                }
              }
            }
            for (; i < tm; ++i) {
              T* row = &acc(i, 0);
              for (int p = 0; p < tk; ++p) {
                const T a = as(p, i);
                const T* b = &bs(p, 0);
                STRATA_IVDEP
                for (int j = 0; j < tn; ++j) row[j] = chain_step<T, Fused>(a, b[j], row[j]);
              }
            }
          }
          for (int i = 0; i < tm; ++i) {
            T* c = C + static_cast<std::ptrdiff_t>(i0 + i) * ldc + j0;
            for (int j = 0; j < tn; ++j)
              c[j] = beta == T(0) ? alpha * acc(i, j) : alpha * acc(i, j) + beta * c[j];
          }
        });
  } else {
    Kokkos::parallel_for(
        "strata::gemm_portable", policy, KOKKOS_LAMBDA(const Member& t) {
          const int i0 = (t.league_rank() / tiles_n) * kTm, j0 = (t.league_rank() % tiles_n) * kTn;
          const int tm = m - i0 < kTm ? m - i0 : kTm, tn = n - j0 < kTn ? n - j0 : kTn;
          Panel as(t.team_scratch(0), kTk, kTm), bs(t.team_scratch(0), kTk, kTn);
          // Thread (ti, tj) owns rows ti + r * kTm / kR and columns tj + c * kTn / kR
          // of the tile (strided, so neighbouring threads read neighbouring
          // scratch words).
          constexpr int si = kTm / kR, sj = kTn / kR;
          const int ti = t.team_rank() / sj, tj = t.team_rank() % sj;
          T acc[kR][kR];
          for (int r = 0; r < kR; ++r)
            for (int c = 0; c < kR; ++c) acc[r][c] = T(0);
          for (int k0 = 0; k0 < k; k0 += kTk) {
            const int tk = k - k0 < kTk ? k - k0 : kTk;
            Kokkos::parallel_for(Kokkos::TeamThreadRange(t, tk * kTm), [&](int e) {
              const int p = e / kTm, i = e % kTm;
              as(p, i) = i < tm ? A[(k0 + p) * a_p + (i0 + i) * a_i] : T(0);
            });
            Kokkos::parallel_for(Kokkos::TeamThreadRange(t, tk * kTn), [&](int e) {
              const int p = e / kTn, j = e % kTn;
              bs(p, j) = j < tn ? B[(k0 + p) * b_p + (j0 + j) * b_j] : T(0);
            });
            t.team_barrier();
            for (int p = 0; p < tk; ++p) {
              T a[kR], b[kR];
              for (int r = 0; r < kR; ++r) a[r] = as(p, ti + r * si);
              for (int c = 0; c < kR; ++c) b[c] = bs(p, tj + c * sj);
              for (int r = 0; r < kR; ++r)
                for (int c = 0; c < kR; ++c) acc[r][c] = chain_step<T, Fused>(a[r], b[c], acc[r][c]);
            }
            t.team_barrier();
          }
          for (int r = 0; r < kR; ++r)
            for (int c = 0; c < kR; ++c) {
              const int i = ti + r * si, j = tj + c * sj;
              if (i >= tm || j >= tn) continue;
              T& out = C[static_cast<std::ptrdiff_t>(i0 + i) * ldc + j0 + j];
              out = beta == T(0) ? alpha * acc[r][c] : alpha * acc[r][c] + beta * out;
            }
        });
  }
}
}  // namespace

template <class T>
void gemm_portable(const ExecSpace& exec, Op ta, Op tb, int m, int n, int k, T alpha,
                   const T* A, int lda, const T* B, int ldb, T beta, T* C, int ldc) {
  gemm_tiled<T, false>(exec, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <class T>
void gemm_portable_fused(const ExecSpace& exec, Op ta, Op tb, int m, int n, int k, T alpha,
                         const T* A, int lda, const T* B, int ldb, T beta, T* C, int ldc) {
  gemm_tiled<T, true>(exec, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

#define STRATA_INSTANTIATE_GEMM(T)                                                         \
  template void Blas::gemm<T>(Op, Op, int, int, int, T, const T*, int, const T*, int, T,  \
                              T*, int) const;                                              \
  template void Blas::gemm_in_kernel<T>(Op, Op, int, int, int, T, const T*, int, const T*,  \
                                        int, T, T*, int) const;                            \
  template void Blas::gemm<T>(Op, Op, T, ConstMatrix<T>, ConstMatrix<T>, T, Matrix<T>)    \
      const;                                                                               \
  template void gemm_portable<T>(const ExecSpace&, Op, Op, int, int, int, T, const T*, int, \
                                 const T*, int, T, T*, int);                              \
  template void gemm_portable_fused<T>(const ExecSpace&, Op, Op, int, int, int, T, const T*, \
                                       int, const T*, int, T, T*, int);
STRATA_INSTANTIATE_GEMM(float)
STRATA_INSTANTIATE_GEMM(double)
#undef STRATA_INSTANTIATE_GEMM

}  // namespace strata
