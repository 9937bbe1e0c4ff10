#include "backends/gemm_reproducible.hpp"

#include "backends/error.hpp"
#include "backends/exact_sum.hpp"
#include "backends/launch.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <type_traits>
#include <vector>

// The AVX2 kernels are host code for x86-64; a CUDA or HIP device pass of
// this file (which sees the host's macros) leaves them out.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(__CUDA_ARCH__) && !defined(__HIP_DEVICE_COMPILE__)
#include <immintrin.h>
#define STRATA_GEMM_AVX2 1
#endif

namespace strata {

namespace {

// C is computed in blocks of about kMb x kNb (one work item each; the rows
// and columns split evenly into blocks of whole tiles, so that the items of
// a GEMM weigh alike over the threads; an exact GEMM's blocks are narrower,
// as the block's exact sums, 16 bytes per value, stay in cache over its
// chunks), p in blocks of
// at most kKc; inside a block, kMr x kNr tiles in registers. A tile's chain
// continues from block to block of p through a float buffer, which holds
// exactly what the registers held, so the blocking never changes a bit.
constexpr int kMr = 6, kNr = 16;
constexpr int kMb = 192, kNb = 512, kNbExact = 256, kKc = 256;

// `n` split into blocks of at most about `target`, whole multiples of `unit`.
[[maybe_unused]] int block_size(int n, int target, int unit) {
  const int blocks = (n + target - 1) / target;
  const int size = (n + blocks - 1) / blocks;
  return (size + unit - 1) / unit * unit;
}

// The tile kernel: ct (kMr x kNr, row-major) = the chain continued over kc
// values of p, from the packed panels ap (p-major, kMr per p) and bp (p-major,
// kNr per p).
template <class T>
void tile_generic(int kc, const T* ap, const T* bp, T* ct) {
  T acc[kMr][kNr];
  for (int r = 0; r < kMr; ++r)
    for (int c = 0; c < kNr; ++c) acc[r][c] = ct[r * kNr + c];
  for (int p = 0; p < kc; ++p, ap += kMr, bp += kNr)
    for (int r = 0; r < kMr; ++r)
      for (int c = 0; c < kNr; ++c) acc[r][c] = std::fma(ap[r], bp[c], acc[r][c]);
  for (int r = 0; r < kMr; ++r)
    for (int c = 0; c < kNr; ++c) ct[r * kNr + c] = acc[r][c];
}

#ifdef STRATA_GEMM_AVX2
// The same chain, eight lanes at a time: _mm256_fmadd_ps rounds each lane
// once, as std::fma does.
[[maybe_unused]] __attribute__((target("avx2,fma")))
void tile_avx2(int kc, const float* ap, const float* bp, float* ct) {
  __m256 c00 = _mm256_loadu_ps(ct + 0), c01 = _mm256_loadu_ps(ct + 8);
  __m256 c10 = _mm256_loadu_ps(ct + 16), c11 = _mm256_loadu_ps(ct + 24);
  __m256 c20 = _mm256_loadu_ps(ct + 32), c21 = _mm256_loadu_ps(ct + 40);
  __m256 c30 = _mm256_loadu_ps(ct + 48), c31 = _mm256_loadu_ps(ct + 56);
  __m256 c40 = _mm256_loadu_ps(ct + 64), c41 = _mm256_loadu_ps(ct + 72);
  __m256 c50 = _mm256_loadu_ps(ct + 80), c51 = _mm256_loadu_ps(ct + 88);
  for (int p = 0; p < kc; ++p, ap += kMr, bp += kNr) {
    const __m256 b0 = _mm256_loadu_ps(bp), b1 = _mm256_loadu_ps(bp + 8);
    __m256 a = _mm256_broadcast_ss(ap + 0);
    c00 = _mm256_fmadd_ps(a, b0, c00);
    c01 = _mm256_fmadd_ps(a, b1, c01);
    a = _mm256_broadcast_ss(ap + 1);
    c10 = _mm256_fmadd_ps(a, b0, c10);
    c11 = _mm256_fmadd_ps(a, b1, c11);
    a = _mm256_broadcast_ss(ap + 2);
    c20 = _mm256_fmadd_ps(a, b0, c20);
    c21 = _mm256_fmadd_ps(a, b1, c21);
    a = _mm256_broadcast_ss(ap + 3);
    c30 = _mm256_fmadd_ps(a, b0, c30);
    c31 = _mm256_fmadd_ps(a, b1, c31);
    a = _mm256_broadcast_ss(ap + 4);
    c40 = _mm256_fmadd_ps(a, b0, c40);
    c41 = _mm256_fmadd_ps(a, b1, c41);
    a = _mm256_broadcast_ss(ap + 5);
    c50 = _mm256_fmadd_ps(a, b0, c50);
    c51 = _mm256_fmadd_ps(a, b1, c51);
  }
  _mm256_storeu_ps(ct + 0, c00), _mm256_storeu_ps(ct + 8, c01);
  _mm256_storeu_ps(ct + 16, c10), _mm256_storeu_ps(ct + 24, c11);
  _mm256_storeu_ps(ct + 32, c20), _mm256_storeu_ps(ct + 40, c21);
  _mm256_storeu_ps(ct + 48, c30), _mm256_storeu_ps(ct + 56, c31);
  _mm256_storeu_ps(ct + 64, c40), _mm256_storeu_ps(ct + 72, c41);
  _mm256_storeu_ps(ct + 80, c50), _mm256_storeu_ps(ct + 88, c51);
}

// exact_add(e + 2 c, x[c]) for c < n, four at a time: the same additions
// as exact_split's, lane by lane, so the same bits; a group with a term
// beyond the grid takes the scalar path (which makes it NaN).
__attribute__((target("avx2,fma"))) void exact_row_avx2(double* e, const float* x, int n) {
  const __m256d c_hi = _mm256_set1_pd(exact::c_hi), c_lo = _mm256_set1_pd(exact::c_lo);
  const __m256d limit = _mm256_set1_pd(exact::term_limit);
  const __m256d sign = _mm256_set1_pd(-0.0);
  int c = 0;
  for (; c + 4 <= n; c += 4) {
    const __m256d v = _mm256_cvtps_pd(_mm_loadu_ps(x + c));
    const __m256d inside = _mm256_cmp_pd(_mm256_andnot_pd(sign, v), limit, _CMP_LT_OQ);
    if (_mm256_movemask_pd(inside) != 0xF) {
      for (int k = c; k < c + 4; ++k) exact_add(e + 2 * k, static_cast<double>(x[k]));
      continue;
    }
    const __m256d h = _mm256_sub_pd(_mm256_add_pd(v, c_hi), c_hi);
    const __m256d r = _mm256_sub_pd(v, h);
    const __m256d l = _mm256_sub_pd(_mm256_add_pd(r, c_lo), c_lo);
    // (h0 l0 h2 l2), (h1 l1 h3 l3), then (h0 l0 h1 l1), (h2 l2 h3 l3): e's order.
    const __m256d even = _mm256_unpacklo_pd(h, l), odd = _mm256_unpackhi_pd(h, l);
    const __m256d first = _mm256_permute2f128_pd(even, odd, 0x20);
    const __m256d second = _mm256_permute2f128_pd(even, odd, 0x31);
    double* p = e + 2 * c;
    _mm256_storeu_pd(p, _mm256_add_pd(_mm256_loadu_pd(p), first));
    _mm256_storeu_pd(p + 4, _mm256_add_pd(_mm256_loadu_pd(p + 4), second));
  }
  for (; c < n; ++c) exact_add(e + 2 * c, static_cast<double>(x[c]));
}

// The same split into separate rows of his and los (no interleaving): hi[c]
// += h, lo[c] += l for c < n.
__attribute__((target("avx2,fma"))) void exact_row_split_avx2(double* hi, double* lo,
                                                              const float* x, int n) {
  const __m256d c_hi = _mm256_set1_pd(exact::c_hi), c_lo = _mm256_set1_pd(exact::c_lo);
  const __m256d limit = _mm256_set1_pd(exact::term_limit);
  const __m256d sign = _mm256_set1_pd(-0.0);
  int c = 0;
  for (; c + 4 <= n; c += 4) {
    const __m256d v = _mm256_cvtps_pd(_mm_loadu_ps(x + c));
    const __m256d inside = _mm256_cmp_pd(_mm256_andnot_pd(sign, v), limit, _CMP_LT_OQ);
    if (_mm256_movemask_pd(inside) != 0xF) {
      for (int k = c; k < c + 4; ++k) {
        double h, l;
        exact_split(static_cast<double>(x[k]), h, l);
        hi[k] += h;
        lo[k] += l;
      }
      continue;
    }
    const __m256d h = _mm256_sub_pd(_mm256_add_pd(v, c_hi), c_hi);
    const __m256d r = _mm256_sub_pd(v, h);
    const __m256d l = _mm256_sub_pd(_mm256_add_pd(r, c_lo), c_lo);
    _mm256_storeu_pd(hi + c, _mm256_add_pd(_mm256_loadu_pd(hi + c), h));
    _mm256_storeu_pd(lo + c, _mm256_add_pd(_mm256_loadu_pd(lo + c), l));
  }
  for (; c < n; ++c) {
    double h, l;
    exact_split(static_cast<double>(x[c]), h, l);
    hi[c] += h;
    lo[c] += l;
  }
}

bool cpu_has_avx2_fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}
#endif

template <class T>
using TileFn = void (*)(int, const T*, const T*, T*);
using ExactRowFn = void (*)(double*, const float*, int);
using ExactRowSplitFn = void (*)(double*, double*, const float*, int);

void exact_row_generic(double* e, const float* x, int n) {
  for (int c = 0; c < n; ++c) exact_add(e + 2 * c, static_cast<double>(x[c]));
}

void exact_row_split_generic(double* hi, double* lo, const float* x, int n) {
  for (int c = 0; c < n; ++c) {
    double h, l;
    exact_split(static_cast<double>(x[c]), h, l);
    hi[c] += h;
    lo[c] += l;
  }
}

[[maybe_unused]] ExactRowFn best_exact_row(bool generic) {
#ifdef STRATA_GEMM_AVX2
  if (!generic && cpu_has_avx2_fma()) return exact_row_avx2;
#endif
  (void)generic;
  return exact_row_generic;
}

[[maybe_unused]] ExactRowSplitFn best_exact_row_split(bool generic) {
#ifdef STRATA_GEMM_AVX2
  if (!generic && cpu_has_avx2_fma()) return exact_row_split_avx2;
#endif
  (void)generic;
  return exact_row_split_generic;
}

template <class T>
TileFn<T> best_tile(bool generic) {
#ifdef STRATA_GEMM_AVX2
  if constexpr (std::is_same_v<T, float>)
    if (!generic && cpu_has_avx2_fma()) return tile_avx2;
#endif
  (void)generic;
  return tile_generic<T>;
}

// One GEMM: plain (C = alpha acc + beta C, one chain over all of k) or
// exact (E += each chunk's chain, exactly).
template <class T>
struct Job {
  Op ta, tb;
  int m, n, k, chunk;
  const T* A;
  int lda;
  const T* B;
  int ldb;
  T alpha, beta;
  T* C;
  int ldc;
  double* E;  // exact: not null
  int lde;
  TileFn<T> tile;
  ExactRowFn exact_row;  // exact
  ExactRowSplitFn exact_row_split;  // exact, whole p range
  int mb = 0, nb = 0;    // block sizes (set by run)
  // The exact whole-range form on several threads: op(A) and op(B) packed
  // once for every block (pack_a and pack_b of the whole matrices, panels
  // of the whole p range), else null and each block packs its own.
  const T* a_packed = nullptr;
  const T* b_packed = nullptr;
};

// Panels of op(A) rows [i0, i0 + mb) and p in [p0, p0 + kc): ap[(panel * kc + p) * kMr + r],
// zero beyond mb.
template <class T>
void pack_a(const Job<T>& j, int i0, int mb, int p0, int kc, T* ap) {
  const std::ptrdiff_t si = j.ta == Op::N ? j.lda : 1, sp = j.ta == Op::N ? 1 : j.lda;
  const int panels = (mb + kMr - 1) / kMr;
  for (int q = 0; q < panels; ++q) {
    T* out = ap + static_cast<std::ptrdiff_t>(q) * kc * kMr;
    const int rows = std::min(kMr, mb - q * kMr);
    const T* a = j.A + (i0 + q * kMr) * si + static_cast<std::ptrdiff_t>(p0) * sp;
    if (si == 1) {  // a panel's rows lie side by side: read along them
      if (rows == kMr) {  // a whole panel: fixed-length copies
        for (int p = 0; p < kc; ++p) {
          const T* ap_row = a + static_cast<std::ptrdiff_t>(p) * sp;
          T* o = out + p * kMr;
          for (int r = 0; r < kMr; ++r) o[r] = ap_row[r];
        }
        continue;
      }
      for (int p = 0; p < kc; ++p) {
        const T* ap_row = a + static_cast<std::ptrdiff_t>(p) * sp;
        T* o = out + p * kMr;
        for (int r = 0; r < rows; ++r) o[r] = ap_row[r];
        for (int r = rows; r < kMr; ++r) o[r] = T(0);
      }
      continue;
    }
    for (int r = 0; r < kMr; ++r) {  // each row along p
      if (r >= rows) {
        for (int p = 0; p < kc; ++p) out[p * kMr + r] = T(0);
        continue;
      }
      const T* row = a + r * si;
      for (int p = 0; p < kc; ++p) out[p * kMr + r] = row[p * sp];
    }
  }
}

// Panels of op(B) p in [p0, p0 + kc) and columns [j0, j0 + nb):
// bp[(panel * kc + p) * kNr + c], zero beyond nb.
template <class T>
void pack_b(const Job<T>& j, int j0, int nb, int p0, int kc, T* bp) {
  const std::ptrdiff_t sp = j.tb == Op::N ? j.ldb : 1, sj = j.tb == Op::N ? 1 : j.ldb;
  const int panels = (nb + kNr - 1) / kNr;
  for (int q = 0; q < panels; ++q) {
    T* out = bp + static_cast<std::ptrdiff_t>(q) * kc * kNr;
    const int cols = std::min(kNr, nb - q * kNr);
    const T* b = j.B + static_cast<std::ptrdiff_t>(p0) * sp + (j0 + q * kNr) * sj;
    if (sj == 1) {  // a row of the panel is contiguous
      if (cols == kNr) {  // a whole panel: fixed-length copies
        for (int p = 0; p < kc; ++p) {
          const T* row = b + static_cast<std::ptrdiff_t>(p) * sp;
          T* o = out + p * kNr;
          for (int c = 0; c < kNr; ++c) o[c] = row[c];
        }
        continue;
      }
      for (int p = 0; p < kc; ++p) {
        const T* row = b + static_cast<std::ptrdiff_t>(p) * sp;
        T* o = out + p * kNr;
        for (int c = 0; c < cols; ++c) o[c] = row[c];
        for (int c = cols; c < kNr; ++c) o[c] = T(0);
      }
      continue;
    }
    for (int c = 0; c < kNr; ++c) {  // each column along p (contiguous)
      if (c >= cols) {
        for (int p = 0; p < kc; ++p) out[p * kNr + c] = T(0);
        continue;
      }
      const T* col = b + static_cast<std::ptrdiff_t>(c) * sj;
      for (int p = 0; p < kc; ++p) out[p * kNr + c] = col[p * sp];
    }
  }
}

// An exact GEMM whose whole p range (the local batch's rows) is packed at
// once: every chunk of a tile before the next tile, the tile's exact sums in
// a local buffer (L1), added into E once. The same exact sums as chunk by
// chunk into E (exact additions in another order), without streaming E's
// block through the cache once per chunk.
constexpr int kKExactWhole = 2048;

template <class T>
void run_item_exact_whole(const Job<T>& j, int i0, int mb, int j0, int nb) {
  const int pm = (mb + kMr - 1) / kMr, pn = (nb + kNr - 1) / kNr;
  thread_local std::vector<T> ap, bp;
  // This block's panels: of the matrices packed once (i0 and j0 are
  // multiples of the panel sizes), or packed here.
  const T* a_panels = nullptr;
  const T* b_panels = nullptr;
  if (j.a_packed != nullptr) {
    a_panels = j.a_packed + static_cast<std::ptrdiff_t>(i0) * j.k;
  } else {
    ap.resize(static_cast<std::size_t>(pm) * kMr * j.k);
    pack_a(j, i0, mb, 0, j.k, ap.data());
    a_panels = ap.data();
  }
  if (j.b_packed != nullptr) {
    b_panels = j.b_packed + static_cast<std::ptrdiff_t>(j0) * j.k;
  } else {
    bp.resize(static_cast<std::size_t>(pn) * kNr * j.k);
    pack_b(j, j0, nb, 0, j.k, bp.data());
    b_panels = bp.data();
  }
  T ct[kMr * kNr];
  double hi[kMr * kNr], lo[kMr * kNr];  // the tile's exact sums, kept apart
  for (int qi = 0; qi < pm; ++qi)
    for (int qj = 0; qj < pn; ++qj) {
      std::fill(hi, hi + kMr * kNr, 0.0);
      std::fill(lo, lo + kMr * kNr, 0.0);
      const T* a = a_panels + static_cast<std::ptrdiff_t>(qi) * j.k * kMr;
      const T* b = b_panels + static_cast<std::ptrdiff_t>(qj) * j.k * kNr;
      for (int c0 = 0; c0 < j.k; c0 += j.chunk) {
        std::fill(ct, ct + kMr * kNr, T(0));
        j.tile(std::min(j.chunk, j.k - c0), a + static_cast<std::ptrdiff_t>(c0) * kMr,
               b + static_cast<std::ptrdiff_t>(c0) * kNr, ct);
        if constexpr (std::is_same_v<T, float>) j.exact_row_split(hi, lo, ct, kMr * kNr);
      }
      const int rows = std::min(kMr, mb - qi * kMr), cols = std::min(kNr, nb - qj * kNr);
      for (int r = 0; r < rows; ++r) {
        double* e = j.E + 2 * (static_cast<std::ptrdiff_t>(i0 + qi * kMr + r) * j.lde + j0 + qj * kNr);
        for (int c = 0; c < cols; ++c) {
          e[2 * c] += hi[r * kNr + c];
          e[2 * c + 1] += lo[r * kNr + c];
        }
      }
    }
}

template <class T>
void run_item(const Job<T>& j, int item) {
  const int blocks_n = (j.n + j.nb - 1) / j.nb;
  const int i0 = (item / blocks_n) * j.mb, j0 = (item % blocks_n) * j.nb;
  const int mb = std::min(j.mb, j.m - i0), nb = std::min(j.nb, j.n - j0);
  if (j.E != nullptr && j.k <= kKExactWhole) {
    run_item_exact_whole(j, i0, mb, j0, nb);
    return;
  }
  const int pm = (mb + kMr - 1) / kMr, pn = (nb + kNr - 1) / kNr;
  thread_local std::vector<T> ap, bp, part;
  ap.resize(static_cast<std::size_t>(pm) * kMr * kKc);
  bp.resize(static_cast<std::size_t>(pn) * kNr * kKc);
  part.resize(static_cast<std::size_t>(pm) * pn * kMr * kNr);
  for (int c0 = 0; c0 < j.k; c0 += j.chunk) {
    const int c1 = std::min(c0 + j.chunk, j.k);
    for (int p0 = c0; p0 < c1; p0 += kKc) {
      const int kc = std::min(kKc, c1 - p0);
      pack_a(j, i0, mb, p0, kc, ap.data());
      pack_b(j, j0, nb, p0, kc, bp.data());
      const bool first = p0 == c0, last = p0 + kc == c1;
      for (int qi = 0; qi < pm; ++qi)
        for (int qj = 0; qj < pn; ++qj) {
          T* ct = part.data() + (static_cast<std::size_t>(qi) * pn + qj) * kMr * kNr;
          if (first) std::fill(ct, ct + kMr * kNr, T(0));
          j.tile(kc, ap.data() + static_cast<std::ptrdiff_t>(qi) * kc * kMr,
                 bp.data() + static_cast<std::ptrdiff_t>(qj) * kc * kNr, ct);
          if (!last) continue;
          const int rows = std::min(kMr, mb - qi * kMr), cols = std::min(kNr, nb - qj * kNr);
          const int ib = i0 + qi * kMr, jb = j0 + qj * kNr;
          if (j.E != nullptr) {
            if constexpr (std::is_same_v<T, float>)
              for (int r = 0; r < rows; ++r)
                j.exact_row(j.E + 2 * (static_cast<std::ptrdiff_t>(ib + r) * j.lde + jb),
                            ct + r * kNr, cols);
          } else {
            for (int r = 0; r < rows; ++r) {
              T* out = j.C + static_cast<std::ptrdiff_t>(ib + r) * j.ldc + jb;
              for (int c = 0; c < cols; ++c)
                out[c] = j.beta == T(0) ? j.alpha * ct[r * kNr + c]
                                        : j.alpha * ct[r * kNr + c] + j.beta * out[c];
            }
          }
        }
    }
  }
}

// here: on the calling thread alone (a call from inside a host kernel).
template <class T>
void run(const ExecSpace& exec, Job<T> j, bool here = false) {
  j.mb = block_size(j.m, kMb, kMr);
  j.nb = block_size(j.n, j.E != nullptr ? kNbExact : kNb, kNr);
  const int items = ((j.m + j.mb - 1) / j.mb) * ((j.n + j.nb - 1) / j.nb);
  if constexpr (host_kernels) {
    if (here || items == 1 || kernel_threads(exec) == 1) {
      for (int i = 0; i < items; ++i) run_item(j, i);
      return;
    }
    // The exact whole-range form: each block would pack its rows of op(A)
    // and its columns of op(B) over the whole p range, every column block
    // of op(B) once per row block (W2's weight gradients spent 12% of the
    // step in pack_b). Packed once instead, in panels, by all threads.
    thread_local std::vector<T> a_packed, b_packed;
    if (j.E != nullptr && j.k <= kKExactWhole) {
      const int pm = (j.m + kMr - 1) / kMr, pn = (j.n + kNr - 1) / kNr;
      a_packed.resize(static_cast<std::size_t>(pm) * kMr * j.k);
      b_packed.resize(static_cast<std::size_t>(pn) * kNr * j.k);
      T* ap = a_packed.data();
      T* bp = b_packed.data();
      Kokkos::parallel_for("strata::gemm_reproducible_pack", Range(exec, 0, pm + pn),
                           [&j, ap, bp, pm](const int q) {
                             if (q < pm)
                               pack_a(j, q * kMr, std::min(kMr, j.m - q * kMr), 0, j.k,
                                      ap + static_cast<std::ptrdiff_t>(q) * kMr * j.k);
                             else
                               pack_b(j, (q - pm) * kNr, std::min(kNr, j.n - (q - pm) * kNr), 0,
                                      j.k, bp + static_cast<std::ptrdiff_t>(q - pm) * kNr * j.k);
                           });
      exec.fence();
      j.a_packed = ap;
      j.b_packed = bp;
    }
    Kokkos::parallel_for("strata::gemm_reproducible", Range(exec, 0, items),
                         [&j](const int i) { run_item(j, i); });
    exec.fence();
  } else {
    (void)exec, (void)items;
  }
}

}  // namespace

namespace detail {
template <class T>
void gemm_reproducible_kernel(const ExecSpace& exec, bool generic, Op ta, Op tb, int m, int n,
                              int k, T alpha, const T* A, int lda, const T* B, int ldb, T beta,
                              T* C, int ldc, bool here) {
  if (m == 0 || n == 0) return;
  if constexpr (!host_kernels) {
    (void)generic;
    STRATA_REQUIRE(!here, runtime, "gemm_reproducible_here: a host-kernel call in a device build");
    gemm_portable_fused(exec, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
  } else {
    if (k == 0) {  // alpha * 0 + beta * C
      for (int i = 0; i < m; ++i)
        for (int c = 0; c < n; ++c) {
          T& out = C[static_cast<std::ptrdiff_t>(i) * ldc + c];
          out = beta == T(0) ? T(0) : beta * out;
        }
      return;
    }
    const Job<T> j{ta, tb, m, n, k, k, A, lda, B, ldb, alpha, beta, C, ldc, nullptr, 0,
                   best_tile<T>(generic), nullptr, nullptr};
    run(exec, j, here);
  }
}

void gemm_exact_chunks_kernel(const ExecSpace& exec, bool generic, Op ta, Op tb, int m, int n,
                              int k, int chunk, const float* A, int lda, const float* B, int ldb,
                              double* E, int lde) {
  STRATA_REQUIRE(chunk > 0, config, "gemm_exact_chunks: chunk ", chunk, " (k = ", k, ")");
  if (m == 0 || n == 0 || k == 0) return;
  if constexpr (!host_kernels) {
    (void)generic;
    // Each chunk's product into a scratch matrix, then added exactly.
    Kokkos::View<float**, Kokkos::LayoutRight, MemSpace> part("strata::gemm_exact::part", m, n);
    const std::ptrdiff_t a_p = ta == Op::N ? 1 : lda, b_p = tb == Op::N ? ldb : 1;
    for (int c0 = 0; c0 < k; c0 += chunk) {
      gemm_portable_fused(exec, ta, tb, m, n, std::min(chunk, k - c0), 1.0f, A + c0 * a_p, lda,
                          B + c0 * b_p, ldb, 0.0f, part.data(), n);
      Kokkos::parallel_for("strata::gemm_exact::add", Range(exec, 0, std::size_t(m) * n),
                           KOKKOS_LAMBDA(const std::size_t e) {
                             const std::size_t i = e / n, c = e % n;
                             exact_add(E + 2 * (i * lde + c), static_cast<double>(part(i, c)));
                           });
    }
    exec.fence();
  } else {
    const Job<float> j{ta, tb, m, n, k, chunk, A, lda, B, ldb, 1.0f, 0.0f, nullptr, 0, E, lde,
                       best_tile<float>(generic), best_exact_row(generic),
                       best_exact_row_split(generic)};
    run(exec, j);
  }
}
}  // namespace detail

template <class T>
void gemm_reproducible(const ExecSpace& exec, Op ta, Op tb, int m, int n, int k, T alpha,
                       const T* A, int lda, const T* B, int ldb, T beta, T* C, int ldc) {
  detail::gemm_reproducible_kernel(exec, false, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C,
                                   ldc, false);
}

template <class T>
void gemm_reproducible_here(Op ta, Op tb, int m, int n, int k, T alpha, const T* A, int lda,
                            const T* B, int ldb, T beta, T* C, int ldc) {
  detail::gemm_reproducible_kernel(ExecSpace(), false, ta, tb, m, n, k, alpha, A, lda, B, ldb,
                                   beta, C, ldc, true);
}

void gemm_exact_chunks(const ExecSpace& exec, Op ta, Op tb, int m, int n, int k, int chunk,
                       const float* A, int lda, const float* B, int ldb, double* E, int lde) {
  detail::gemm_exact_chunks_kernel(exec, false, ta, tb, m, n, k, chunk, A, lda, B, ldb, E, lde);
}

const char* gemm_reproducible_kernel() {
  if constexpr (!host_kernels) return "portable";
#ifdef STRATA_GEMM_AVX2
  if (cpu_has_avx2_fma()) return "avx2+fma";
#endif
  return "generic";
}

template void gemm_reproducible<float>(const ExecSpace&, Op, Op, int, int, int, float,
                                       const float*, int, const float*, int, float, float*, int);
template void gemm_reproducible<double>(const ExecSpace&, Op, Op, int, int, int, double,
                                        const double*, int, const double*, int, double, double*,
                                        int);
template void gemm_reproducible_here<float>(Op, Op, int, int, int, float, const float*, int,
                                            const float*, int, float, float*, int);
template void gemm_reproducible_here<double>(Op, Op, int, int, int, double, const double*, int,
                                             const double*, int, double, double*, int);
template void detail::gemm_reproducible_kernel<float>(const ExecSpace&, bool, Op, Op, int, int,
                                                      int, float, const float*, int,
                                                      const float*, int, float, float*, int, bool);

}  // namespace strata
