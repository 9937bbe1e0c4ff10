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

#include "backends/launch.hpp"

#include <cstddef>

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

template <std::size_t K, class Term, class Finish>
void segment_sums(const Context& ctx, const char* stage1, const char* stage2, Terms layout,
                  std::size_t segments, std::size_t outer, std::size_t inner, double* work,
                  const Term& term, const Finish& finish) {
  if (inner == 0) outer = 0, inner = 1;  // no terms (and no division by zero)
  const std::size_t terms = outer * inner, P = segment_partials(segments, terms);
  if (segments == 0) return;
  if (layout == Terms::contiguous) {
    // Each item streams through its block of L terms in order, into four
    // accumulators in turn (one chain of dependent double additions runs at
    // an add's latency, a quarter of what a core can add). The same order on
    // every backend: --reproducible's per-row statistics are the same bits
    // on the host and on a GPU (there, neighbouring threads read 256 bytes
    // apart, each its own cache lines in turn).
    const std::size_t L = (terms + P - 1) / P;
    for_range(ctx, stage1, segments * P, KOKKOS_LAMBDA(const std::size_t item) {
          const std::size_t s = item / P, p = item % P;
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
          for (std::size_t k = 0; k < K; ++k) work[item * K + k] = (a0[k] + a1[k]) + (a2[k] + a3[k]);
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
