// Many long sums at once, in double, shaped for every backend: the sums over
// the batch that a layer takes per channel or per column (BatchNorm's
// statistics and parameter gradients, a bias gradient, LayerNorm's
// parameter gradients).
//
// Each of `segments` segments sums `outer x inner` terms (a channel: the
// batch's samples x its positions; a column: the rows x 1). One item per
// segment that walks every term leaves a GPU idle (32 items for the first
// BatchNorm of the CNN) and adds 100,000 floats one by one in float. Here:
//
//   stage 1  segments x P items (P = segment_partials(segments, terms),
//            about 64 terms each, at most 1024, at most 65,536 items): each adds its share of the terms in
//            double into the workspace;
//   stage 2  one item per segment adds its P partial sums in order and
//            calls finish(segment, sums) with the K totals.
//
// Item p of a segment takes the block of terms [p L, (p + 1) L) (L =
// ceil(terms / P)); which items neighbour depends on where the terms lie:
//   Terms::contiguous    the terms of one segment lie side by side (a
//                        channel's positions, a row's features): the items
//                        of one segment neighbour, each streaming its block
//                        (four accumulators in turn);
//   Terms::interleaved   term j of neighbouring segments lie side by side (a
//                        column of a row-major matrix): the items of one p,
//                        over every segment, neighbour, so that neighbouring
//                        GPU threads read neighbouring addresses.
// The split and the order depend on the counts only, never on the thread
// count or the backend: the same inputs give the same bits with any number
// of threads, on the host and on a GPU.
//
// term(segment, o, i, acc) adds its K values (o < outer, i < inner) to
// double acc[K]; finish(segment, const double* totals) runs once per
// segment, in a kernel, after stage 1.
#pragma once

#include "backends/host_clones.hpp"
#include "backends/lanes.hpp"
#include "backends/launch.hpp"

#include <cstddef>
#include <type_traits>
#include <utility>

namespace strata {

// Partial sums per segment of `terms` terms: about 64 terms each, at most
// 1024, so that the statistics of the CNN's BatchNorms (32 channels of
// 100,352 values, 64 of 25,088) launch 16,384 items or more; and no more
// than 65,536 items in all when there are many segments (many columns need
// no split for a GPU to be busy, and the workspace stays small).
inline std::size_t segment_partials(std::size_t segments, std::size_t terms) {
  constexpr std::size_t per_partial = 64, most = 1024, most_items = 65536;
  std::size_t p = (terms + per_partial - 1) / per_partial;
  const std::size_t by_items = segments > 0 ? most_items / segments : most;
  if (p > most) p = most;
  if (p > by_items) p = by_items;
  return p < 1 ? 1 : p;
}

// The doubles of workspace segment_sums needs.
inline std::size_t segment_sums_workspace(std::size_t segments, std::size_t terms, std::size_t K) {
  return segments * segment_partials(segments, terms) * K;
}

enum class Terms { contiguous, interleaved };

// Context's shared workspace for segment_sums, at least `doubles` long.
// Grown in place: the old buffer is freed before the new one is allocated,
// uninitialised (every user writes before it reads).
inline double* sums_workspace(Context& ctx, std::size_t doubles) {
  if (ctx.sums_workspace.extent(0) < doubles) {
    ctx.sums_workspace = Kokkos::View<double*, MemSpace>();
    ctx.sums_workspace = Kokkos::View<double*, MemSpace>(
        Kokkos::view_alloc(Kokkos::WithoutInitializing, "strata::sums_workspace"), doubles);
  }
  return ctx.sums_workspace.data();
}

namespace detail {

// Partial p of segment s (Terms::contiguous), on every backend: the block of
// L terms [p L, (p + 1) L) of the segment, each run of it inside one row
// (o, i) .. (o, i + run - 1) added into four accumulators in turn from the
// first (one chain of dependent double additions runs at an add's latency,
// a quarter of what a core can add), the run's last terms (run mod 4) into
// the first; out[k] = (a0 + a1) + (a2 + a3).
template <std::size_t K, class Term>
KOKKOS_INLINE_FUNCTION void contiguous_partial(const Term& term, std::size_t s, std::size_t p,
                                               std::size_t L, std::size_t terms,
                                               std::size_t inner, double* out) {
  double a0[K] = {}, a1[K] = {}, a2[K] = {}, a3[K] = {};
  const std::size_t begin = p * L, end = begin + L < terms ? begin + L : terms;
  std::size_t o = begin / inner, i = begin % inner;
  for (std::size_t j = begin; j < end;) {
    // The run of terms in row o: (o, i) .. (o, i + run - 1).
    const std::size_t run = end - j < inner - i ? end - j : inner - i;
    std::size_t r = 0;
    for (; r + 4 <= run; r += 4) {
      term(s, o, i + r, a0);
      term(s, o, i + r + 1, a1);
      term(s, o, i + r + 2, a2);
      term(s, o, i + r + 3, a3);
    }
    for (; r < run; ++r) term(s, o, i + r, a0);
    j += run;
    i += run;
    if (i == inner) {
      i = 0;
      ++o;
    }
  }
  for (std::size_t k = 0; k < K; ++k) out[k] = (a0[k] + a1[k]) + (a2[k] + a3[k]);
}

// Whether Term also adds four consecutive terms at once:
// term.four(segment, o, i, acc) adds terms (o, i) .. (o, i + 3) into lanes
// 0..3 of acc[K] (backends/lanes.hpp), each lane what term(segment, o, i + l,
// acc_l) adds to accumulator l: host terms only.
template <class Term, class = void>
struct has_four : std::false_type {};
template <class Term>
struct has_four<Term, std::void_t<decltype(std::declval<const Term&>().four(
                          std::size_t(), std::size_t(), std::size_t(), static_cast<Lanes4*>(nullptr)))>>
    : std::true_type {};

// contiguous_partial for a Term with `four`, on a host thread: the four
// accumulators as the lanes of one vector (lane l is accumulator l), the
// run's last terms into lane 0 one by one: the same additions in the same
// order, so the same bits, four at a time.
template <std::size_t K, class Term>
inline void contiguous_partial_lanes(const Term& term, std::size_t s, std::size_t p, std::size_t L,
                                     std::size_t terms, std::size_t inner, double* out) {
  Lanes4 a[K] = {};
  const std::size_t begin = p * L, end = begin + L < terms ? begin + L : terms;
  std::size_t o = begin / inner, i = begin % inner;
  for (std::size_t j = begin; j < end;) {
    const std::size_t run = end - j < inner - i ? end - j : inner - i;
    std::size_t r = 0;
    for (; r + 4 <= run; r += 4) term.four(s, o, i + r, a);
    for (; r < run; ++r) {
      double a0[K];
      for (std::size_t k = 0; k < K; ++k) a0[k] = a[k][0];
      term(s, o, i + r, a0);
      for (std::size_t k = 0; k < K; ++k) a[k][0] = a0[k];
    }
    j += run;
    i += run;
    if (i == inner) {
      i = 0;
      ++o;
    }
  }
  for (std::size_t k = 0; k < K; ++k) out[k] = (a[k][0] + a[k][1]) + (a[k][2] + a[k][3]);
}

// Segments per block of contiguous_partials_by_rows (its accumulators are
// on the stack: 4 K doubles per segment).
inline constexpr std::size_t rows_block_segments = 64;

// The partials [p0, p1) of segments [s0, s1) (at most rows_block_segments),
// each with the arithmetic of contiguous_partial, into work[(s P + p) K + k],
// visited row by row on a host thread: every segment's part of row o, then
// row o + 1. Where the rows of a segment lie apart (a channel of NCHW
// images: one 3 KiB row per sample, the samples 100 KiB apart), the
// segments' parts of one row lie side by side, so the host reads memory in
// order (W4's first BatchNorm: one pass over its input in 2.7 ms by
// partials, a plain read 1 ms, on an AMD EPYC). Each partial still adds
// its runs in row order, each run from the first accumulator: the same
// bits.
template <std::size_t K, class Term>
STRATA_HOST_CLONES_FLAT void contiguous_partials_by_rows(
    const Term& term, std::size_t s0, std::size_t s1, std::size_t p0, std::size_t p1,
    std::size_t P, std::size_t L, std::size_t terms, std::size_t inner, double* work) {
  double acc[rows_block_segments][4][K] = {};
  const std::size_t first = p0 * L;
  const std::size_t last = p1 * L < terms ? p1 * L : terms;  // one past
  for (std::size_t o = first / inner; o * inner < last; ++o) {
    const std::size_t row_begin = o * inner > first ? o * inner : first;
    const std::size_t row_end = (o + 1) * inner < last ? (o + 1) * inner : last;
    const std::size_t row_p = row_begin / L;  // the partial the row begins in
    for (std::size_t s = s0; s < s1; ++s) {
      auto& a = acc[s - s0];
      for (std::size_t j = row_begin, p = row_p; j < row_end; ++p) {
        // The run of partial p in this row: terms [j, stop).
        const std::size_t p_end = (p + 1) * L < terms ? (p + 1) * L : terms;
        const std::size_t stop = p_end < row_end ? p_end : row_end, i = j - o * inner;
        const std::size_t run = stop - j;
        std::size_t r = 0;
        for (; r + 4 <= run; r += 4) {
          term(s, o, i + r, a[0]);
          term(s, o, i + r + 1, a[1]);
          term(s, o, i + r + 2, a[2]);
          term(s, o, i + r + 3, a[3]);
        }
        for (; r < run; ++r) term(s, o, i + r, a[0]);
        if (stop == p_end) {  // the partial is complete
          for (std::size_t k = 0; k < K; ++k) {
            work[(s * P + p) * K + k] = (a[0][k] + a[1][k]) + (a[2][k] + a[3][k]);
            a[0][k] = a[1][k] = a[2][k] = a[3][k] = 0;
          }
        }
        j = stop;
      }
    }
  }
  // Partials that begin at or after the last term hold no terms.
  for (std::size_t p = p0; p < p1; ++p)
    if (p * L >= terms)
      for (std::size_t s = s0; s < s1; ++s)
        for (std::size_t k = 0; k < K; ++k) work[(s * P + p) * K + k] = 0;
}

}  // namespace detail

// The K totals of segment s (Terms::contiguous) on the calling thread, with
// segment_sums' bits: its partials in its order, added in partial order. For
// host kernels that take one segment per item and use its totals right away
// (BatchNorm's channels: statistics, then the channel normalised while its
// values are still in the core's cache).
template <std::size_t K, class Term>
inline void segment_total(const Term& term, std::size_t s, std::size_t segments,
                                          std::size_t outer, std::size_t inner, double* total) {
  if (inner == 0) outer = 0, inner = 1;
  const std::size_t terms = outer * inner, P = segment_partials(segments, terms);
  const std::size_t L = (terms + P - 1) / P;
  for (std::size_t k = 0; k < K; ++k) total[k] = 0;
  for (std::size_t p = 0; p < P; ++p) {
    double part[K];
    if constexpr (detail::has_four<Term>::value)
      detail::contiguous_partial_lanes<K>(term, s, p, L, terms, inner, part);
    else
      detail::contiguous_partial<K>(term, s, p, L, terms, inner, part);
    for (std::size_t k = 0; k < K; ++k) total[k] += part[k];
  }
}

template <std::size_t K, class Term, class Finish>
void segment_sums(const Context& ctx, const char* stage1, const char* stage2, Terms layout,
                  std::size_t segments, std::size_t outer, std::size_t inner, double* work,
                  const Term& term, const Finish& finish) {
  if (inner == 0) outer = 0, inner = 1;  // no terms (and no division by zero)
  const std::size_t terms = outer * inner, P = segment_partials(segments, terms);
  if (segments == 0) return;
  if (layout == Terms::contiguous) {
    // Each item streams through its block of L terms in order
    // (detail::contiguous_partial). The same order on every backend:
    // --reproducible's per-row statistics are the same bits on the host and
    // on a GPU (there, neighbouring threads read 256 bytes apart, each its
    // own cache lines in turn).
    const std::size_t L = (terms + P - 1) / P;
    if constexpr (host_kernels) {
      if (outer > 1) {
        // A segment's rows lie apart: the host visits the partials row by
        // row instead (the same bits), each item a block of segments and a
        // group of about 2^15 of their terms' partials.
        constexpr std::size_t B = detail::rows_block_segments;
        const std::size_t blocks = (segments + B - 1) / B, per_block = segments < B ? segments : B;
        const std::size_t group = (std::size_t(1) << 15) / (L * per_block) + 1;
        const std::size_t groups = (P + group - 1) / group;
        for_range(ctx, stage1, blocks * groups, [=](const std::size_t item) {
              const std::size_t b = item / groups, g = item % groups;
              const std::size_t s0 = b * B, s1 = s0 + B < segments ? s0 + B : segments;
              const std::size_t p0 = g * group, p1 = p0 + group < P ? p0 + group : P;
              detail::contiguous_partials_by_rows<K>(term, s0, s1, p0, p1, P, L, terms, inner, work);
            },
            group * L * per_block);
      }
    }
    if (!host_kernels || outer <= 1)
      for_range(ctx, stage1, segments * P, KOKKOS_LAMBDA(const std::size_t item) {
            detail::contiguous_partial<K>(term, item / P, item % P, L, terms, inner, work + item * K);
          },
          L);
  } else {
    const std::size_t L = (terms + P - 1) / P;
    for_range(ctx, stage1, segments * P, KOKKOS_LAMBDA(const std::size_t item) {
          const std::size_t p = item / segments, s = item % segments;
          double acc[K] = {};
          const std::size_t begin = p * L, end = begin + L < terms ? begin + L : terms;
          std::size_t o = begin / inner, i = begin % inner;
          for (std::size_t j = begin; j < end; ++j) {
            term(s, o, i, acc);
            if (++i == inner) {
              i = 0;
              ++o;
            }
          }
          for (std::size_t k = 0; k < K; ++k) work[(s * P + p) * K + k] = acc[k];
        },
        L);
  }
  for_range(ctx, stage2, segments, KOKKOS_LAMBDA(const std::size_t s) {
        double total[K] = {};
        for (std::size_t p = 0; p < P; ++p)
          for (std::size_t k = 0; k < K; ++k) total[k] += work[(s * P + p) * K + k];
        finish(s, static_cast<const double*>(total));
      },
      P * K);
}

}  // namespace strata
