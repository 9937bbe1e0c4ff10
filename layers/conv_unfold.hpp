// The unfolding of a convolution's input into patch rows (im2col) and the
// folding of patch rows back into an input gradient (col2im), as functions of
// one window geometry that Conv2d's kernels call (layers/conv2d.hpp):
//   - per row: a patch row of one sample (P = OH OW values), or an input
//     row or plane folded from its patch rows. What a host thread runs: runs
//     of contiguous copies and adds that vectorise.
//   - per value: one patch entry, or one input pixel's sum. What a device
//     runs, one thread per value (tests/layers/test_cnn_layers.cpp checks them
//     against the row forms).
// Both forms give the same bits: a pixel's gradient starts at zero and adds
// the patch entries that read it in kernel order (kernel rows, then kernel
// columns), with no atomics.
#pragma once

#include "backends/kokkos.hpp"
#include "layers/window2d.hpp"

#include <cstddef>
#include <cstdint>

namespace strata::conv_unfold {

using I = std::int64_t;

// The window geometry of one convolution in kernel-friendly integers, and the
// output columns [lo, hi) whose input column ow SW + iw0 lies inside the image
// (iw0 = kw DW - PW: the kernel column's offset).
struct ConvGeometry {
  I C, H, W, OH, OW, KH, KW, SH, SW, PH, PW, DH, DW;
  KOKKOS_INLINE_FUNCTION I lo(I iw0) const {
    const I l = iw0 >= 0 ? 0 : (-iw0 + SW - 1) / SW;  // the first ow with ow SW + iw0 >= 0
    return l < OW ? l : OW;
  }
  KOKKOS_INLINE_FUNCTION I hi(I iw0) const {
    if (W - iw0 <= 0) return 0;
    const I h = (W - iw0 + SW - 1) / SW;  // the first ow with ow SW + iw0 >= W
    return h < OW ? h : OW;
  }
  // Unit strides and as many output as input columns: the patch entry
  // (kh, kw) of output position p = oh OW + ow reads input pixel p + ih0 W +
  // iw0 (ih0 = kh DH - PH) whenever that pixel is inside the image, so a
  // patch row is the input plane shifted (the "same" convolutions of CNNs).
  KOKKOS_INLINE_FUNCTION bool shifted_plane() const { return SH == 1 && SW == 1 && OW == W; }
  // The output rows [row_lo, row_hi) whose input row oh + ih0 is inside.
  KOKKOS_INLINE_FUNCTION I row_lo(I ih0) const {
    const I l = ih0 >= 0 ? 0 : -ih0;
    return l < OH ? l : OH;
  }
  KOKKOS_INLINE_FUNCTION I row_hi(I ih0) const {
    const I h = H - ih0 < OH ? H - ih0 : OH;
    const I l = row_lo(ih0);
    return h > l ? h : l;
  }
};

inline ConvGeometry geometry(const Window2d& w, std::size_t c, std::size_t h, std::size_t wd,
                      std::size_t oh, std::size_t ow) {
  return {static_cast<I>(c),    static_cast<I>(h),    static_cast<I>(wd),   static_cast<I>(oh),
          static_cast<I>(ow),   static_cast<I>(w.kh), static_cast<I>(w.kw), static_cast<I>(w.sh),
          static_cast<I>(w.sw), static_cast<I>(w.ph), static_cast<I>(w.pw), static_cast<I>(w.dh),
          static_cast<I>(w.dw)};
}

// Zeros n values from p. A run of one (a padding column) is stored
// directly: GCC turns the loop into a call of memset, which for 4 bytes cost
// more than the rest of W4's second convolution's unfolding and folding
// together (5% of its backward on an AMD EPYC).
template <class T>
KOKKOS_INLINE_FUNCTION void zero_run(T* p, I n) {
  if (n == 1) {
    p[0] = T(0);
    return;
  }
  for (I i = 0; i < n; ++i) p[i] = T(0);
}

// Zeros the columns of rows [r0, r1) of a patch row outside [lo, hi).
template <class T>
KOKKOS_INLINE_FUNCTION void zero_outside(const ConvGeometry& g, T* out, I r0, I r1, I lo, I hi) {
  if (lo == 0 && hi == g.OW) return;
  for (I oh = r0; oh < r1; ++oh) {
    T* row = out + oh * g.OW;
    zero_run(row, lo);
    zero_run(row + hi, g.OW - hi);
  }
}

// Patch row (c, kh, kw) of one sample: its P = OH OW values, read from the
// sample's channel plane c (zero where the window leaves the image).
template <class T>
KOKKOS_INLINE_FUNCTION void unfold_row(const ConvGeometry& g, const T* plane, I kh, I kw, T* out) {
  const I P = g.OH * g.OW, iw0 = kw * g.DW - g.PW, lo = g.lo(iw0), hi = g.hi(iw0);
  if (g.shifted_plane()) {
    // The plane shifted by (ih0, iw0): one contiguous copy, then zeros where
    // the window leaves the image (the rows above or below it, the columns
    // that wrapped to the next row).
    const I ih0 = kh * g.DH - g.PH, r0 = g.row_lo(ih0), r1 = g.row_hi(ih0);
    const bool any = r1 > r0 && hi > lo;
    const I begin = any ? r0 * g.OW + lo : 0, end = any ? (r1 - 1) * g.OW + hi : 0;
    const I shift = ih0 * g.W + iw0;
    for (I p = 0; p < begin; ++p) out[p] = T(0);
    for (I p = begin; p < end; ++p) out[p] = plane[p + shift];
    for (I p = end; p < P; ++p) out[p] = T(0);
    if (any) zero_outside(g, out, r0, r1, lo, hi);
    return;
  }
  // Each output row a (strided) copy of an input row.
  for (I oh = 0; oh < g.OH; ++oh, out += g.OW) {
    const I ih = oh * g.SH - g.PH + kh * g.DH;
    if (ih < 0 || ih >= g.H || hi <= lo) {
      for (I ow = 0; ow < g.OW; ++ow) out[ow] = T(0);
      continue;
    }
    const I base = ih * g.W + iw0;  // may be negative; base + ow SW is not, from lo on
    zero_run(out, lo);
    if (g.SW == 1)
      for (I ow = lo; ow < hi; ++ow) out[ow] = plane[base + ow];
    else
      for (I ow = lo; ow < hi; ++ow) out[ow] = plane[base + ow * g.SW];
    zero_run(out + hi, g.OW - hi);
  }
}

// Input row ih of one sample's channel plane folded from its patch rows:
// `rows` points at the run of patch row (c, 0, 0) of the sample, patch rows
// `stride` apart. The row starts at zero and adds, kernel rows then kernel
// columns in order, the output row of each patch entry that reads it (a
// gather: no atomics, a fixed order per pixel).
template <class T>
KOKKOS_INLINE_FUNCTION void fold_row(const ConvGeometry& g, const T* rows, I stride, I ih, T* row) {
  for (I iw = 0; iw < g.W; ++iw) row[iw] = T(0);
  for (I kh = 0; kh < g.KH; ++kh) {
    const I th = ih + g.PH - kh * g.DH;  // = oh SH
    if (th < 0 || th % g.SH != 0 || th / g.SH >= g.OH) continue;
    const I oh = th / g.SH;
    for (I kw = 0; kw < g.KW; ++kw) {
      const I iw0 = kw * g.DW - g.PW, lo = g.lo(iw0), hi = g.hi(iw0);
      const T* src = rows + (kh * g.KW + kw) * stride + oh * g.OW;
      if (g.SW == 1)
        for (I ow = lo; ow < hi; ++ow) row[ow + iw0] += src[ow];
      else
        for (I ow = lo; ow < hi; ++ow) row[ow * g.SW + iw0] += src[ow];
    }
  }
}

// The same for a whole plane of a shifted-plane convolution: each patch row
// one contiguous shifted add, once its entries that fall outside the image
// (those that would wrap to the next row) are zeroed in `rows`. Each pixel
// sums the same terms in the same order as fold_row.
template <class T>
KOKKOS_INLINE_FUNCTION void fold_plane(const ConvGeometry& g, T* rows, I stride, T* plane) {
  for (I p = 0; p < g.H * g.W; ++p) plane[p] = T(0);
  for (I kh = 0; kh < g.KH; ++kh) {
    const I ih0 = kh * g.DH - g.PH, r0 = g.row_lo(ih0), r1 = g.row_hi(ih0);
    for (I kw = 0; kw < g.KW; ++kw) {
      const I iw0 = kw * g.DW - g.PW, lo = g.lo(iw0), hi = g.hi(iw0);
      if (r1 <= r0 || hi <= lo) continue;
      T* src = rows + (kh * g.KW + kw) * stride;
      zero_outside(g, src, r0, r1, lo, hi);
      const I shift = ih0 * g.W + iw0;
      for (I p = r0 * g.OW + lo; p < (r1 - 1) * g.OW + hi; ++p) plane[p + shift] += src[p];
    }
  }
}

// All C K patch rows of one sample (`x`: its C planes) into col(C K, P).
template <class T>
KOKKOS_INLINE_FUNCTION void unfold_sample(const ConvGeometry& g, const T* x, T* col) {
  const I P = g.OH * g.OW;
  for (I c = 0; c < g.C; ++c)
    for (I kh = 0; kh < g.KH; ++kh)
      for (I kw = 0; kw < g.KW; ++kw)
        unfold_row(g, x + c * g.H * g.W, kh, kw, col + ((c * g.KH + kh) * g.KW + kw) * P);
}

// One sample's input gradient (`dx`: its C planes) folded from dcol(C K, P)
// (whose wrapped entries fold_plane zeroes).
template <class T>
KOKKOS_INLINE_FUNCTION void fold_sample(const ConvGeometry& g, T* col, T* dx) {
  const I P = g.OH * g.OW, K = g.KH * g.KW;
  for (I c = 0; c < g.C; ++c) {
    T* rows = col + c * K * P;
    T* plane = dx + c * g.H * g.W;
    if (g.shifted_plane())
      fold_plane(g, rows, P, plane);
    else
      for (I ih = 0; ih < g.H; ++ih) fold_row(g, rows, P, ih, plane + ih * g.W);
  }
}

// ------------------------------------------------------------ one value each
// Entry p of patch row (c, kh, kw) of one sample, read from the sample's
// channel plane c: the input pixel the window puts there, or zero (padding).
template <class T>
KOKKOS_INLINE_FUNCTION T unfold_value(const ConvGeometry& g, const T* plane, I kh, I kw, I p) {
  const I oh = p / g.OW, ow = p - oh * g.OW;
  const I ih = oh * g.SH - g.PH + kh * g.DH, iw = ow * g.SW - g.PW + kw * g.DW;
  return ih >= 0 && ih < g.H && iw >= 0 && iw < g.W ? plane[ih * g.W + iw] : T(0);
}

// Input pixel (ih, iw) of one sample's channel gradient, folded from its
// patch rows (`rows`: patch row (c, 0, 0), rows `stride` apart): the entries
// that read the pixel, added to zero in kernel order, as fold_row and
// fold_plane add them.
template <class T>
KOKKOS_INLINE_FUNCTION T fold_value(const ConvGeometry& g, const T* rows, I stride, I ih, I iw) {
  T sum = T(0);
  for (I kh = 0; kh < g.KH; ++kh) {
    const I th = ih + g.PH - kh * g.DH;  // = oh SH
    if (th < 0 || th % g.SH != 0 || th / g.SH >= g.OH) continue;
    const I oh = th / g.SH;
    for (I kw = 0; kw < g.KW; ++kw) {
      const I tw = iw + g.PW - kw * g.DW;  // = ow SW
      if (tw < 0 || tw % g.SW != 0 || tw / g.SW >= g.OW) continue;
      sum += rows[(kh * g.KW + kw) * stride + oh * g.OW + tw / g.SW];
    }
  }
  return sum;
}

}  // namespace strata::conv_unfold
