#include "layers/pool2d.hpp"

#include "backends/error.hpp"
#include "backends/launch.hpp"
#include "layers/model_spec.hpp"
#include "layers/registry.hpp"

#include <cstdint>

namespace strata {

template <class T>
Pool2d<T>::Pool2d(PoolKind kind, const Window2d& window, bool count_include_pad)
    : kind_(kind), win_(window), count_include_pad_(count_include_pad) {
  if (kind_ == PoolKind::global_avg) return;
  STRATA_REQUIRE(win_.kh > 0 && win_.kw > 0 && win_.sh > 0 && win_.sw > 0 && win_.dh > 0 &&
                     win_.dw > 0,
                 config, "Pool2d: kernel, stride and dilation must be positive");
  STRATA_REQUIRE(2 * win_.ph <= win_.kh && 2 * win_.pw <= win_.kw, config, name(),
                 ": padding must be at most half the kernel (as PyTorch requires)");
  STRATA_REQUIRE(kind_ == PoolKind::max || (win_.dh == 1 && win_.dw == 1), config, name(),
                 ": average pooling has no dilation");
}

template <class T>
template <PoolKind kind>
LayerPtr<T> Pool2d<T>::from_args(LayerArgs& args, const Shape& in, LayerBuild&) {
  STRATA_REQUIRE(in.rank() == 3, config,
                 "pooling expects images of shape {channels, height, width} but gets shape ",
                 in.str());
  if constexpr (kind == PoolKind::global_avg) {
    return std::make_unique<Pool2d<T>>(kind, Window2d{});
  } else {
    // The stride defaults to the kernel, as in PyTorch.
    const Window2d w = Window2d::from_args(args, {0, 0});
    const bool include_pad =
        kind == PoolKind::avg ? args.flag("count_include_pad", true) : true;
    return std::make_unique<Pool2d<T>>(kind, w, include_pad);
  }
}

template <class T>
std::string Pool2d<T>::name() const {
  switch (kind_) {
    case PoolKind::max: return "MaxPool2d(" + win_.str() + ")";
    case PoolKind::avg:
      return "AvgPool2d(" + win_.str() + (count_include_pad_ ? ")" : ", count_include_pad=false)");
    case PoolKind::global_avg: return "GlobalAvgPool2d";
  }
  return "?";
}

template <class T>
Window2d Pool2d<T>::window(std::size_t h, std::size_t w) const {
  if (kind_ != PoolKind::global_avg) return win_;
  Window2d g;
  g.kh = g.sh = h;
  g.kw = g.sw = w;
  return g;
}

template <class T>
Shape Pool2d<T>::output_shape(const Shape& in) const {
  STRATA_REQUIRE(in.rank() == 3, config, name(),
                 " expects images of shape {channels, height, width} but gets shape ", in.str());
  const Window2d w = window(in[1], in[2]);
  w.check_input(name(), in);
  if (kind_ == PoolKind::global_avg) return Shape{in[0]};
  return Shape{in[0], w.out_h(in[1]), w.out_w(in[2])};
}

template <class T>
void Pool2d<T>::set_input_shape(const Shape& in) {
  output_shape(in);
  Layer<T>::set_input_shape(in);
  const Window2d w = window(in[1], in[2]);
  c_ = in[0], h_ = in[1], w_ = in[2], oh_ = w.out_h(h_), ow_ = w.out_w(w_);
}

template <class T>
void Pool2d<T>::add_costs(std::vector<LayerCost>& out) const {
  const Window2d w = window(h_, w_);
  out.push_back(this->cost(static_cast<double>(c_ * oh_ * ow_ * w.kh * w.kw)));
}

namespace {
// The window of one pooling layer in kernel-friendly integers.
struct Geometry {
  std::int64_t H, W, OH, OW, KH, KW, SH, SW, PH, PW, DH, DW;
  Geometry(const Window2d& w, std::size_t h, std::size_t wd, std::size_t oh, std::size_t ow)
      : H(h), W(wd), OH(oh), OW(ow), KH(w.kh), KW(w.kw), SH(w.sh), SW(w.sw), PH(w.ph), PW(w.pw),
        DH(w.dh), DW(w.dw) {}
};

// The in-image index of output (oh, ow)'s maximum, -1 when its window holds
// no pixel. PyTorch's rule: the first maximum in window order, or the last NaN.
template <class T>
KOKKOS_INLINE_FUNCTION std::int64_t argmax(const Geometry& g, const T* plane, std::int64_t oh,
                                           std::int64_t ow) {
  std::int64_t best = -1;
  T m = 0;
  for (std::int64_t kh = 0; kh < g.KH; ++kh) {
    const std::int64_t ih = oh * g.SH - g.PH + kh * g.DH;
    if (ih < 0 || ih >= g.H) continue;
    for (std::int64_t kw = 0; kw < g.KW; ++kw) {
      const std::int64_t iw = ow * g.SW - g.PW + kw * g.DW;
      if (iw < 0 || iw >= g.W) continue;
      const T v = plane[ih * g.W + iw];
      if (best < 0 || v > m || v != v) {  // PyTorch's test: a later NaN wins too
        best = ih * g.W + iw;
        m = v;
      }
    }
  }
  return best;
}

// The same for a layer without padding, where every window lies inside the
// image (the output size rounds down): no bounds to check.
template <class T>
KOKKOS_INLINE_FUNCTION std::int64_t argmax_inside(const Geometry& g, const T* plane,
                                                  std::int64_t oh, std::int64_t ow) {
  const std::int64_t origin = oh * g.SH * g.W + ow * g.SW;
  const T* p = plane + origin;
  std::int64_t best = 0;
  T m = p[0];
  for (std::int64_t kh = 0; kh < g.KH; ++kh)
    for (std::int64_t kw = 0; kw < g.KW; ++kw) {
      const std::int64_t at = kh * g.DH * g.W + kw * g.DW;
      const T v = p[at];
      if (v > m || v != v) {
        best = at;
        m = v;
      }
    }
  return origin + best;
}

// Rows [h0, h1) x columns [w0, w1) of output (oh, ow)'s window inside the
// image, and the divisor of its mean.
struct AvgWindow {
  std::int64_t h0, h1, w0, w1, divisor;
};
KOKKOS_INLINE_FUNCTION AvgWindow avg_window(const Geometry& g, std::int64_t oh, std::int64_t ow,
                                            bool include_pad) {
  AvgWindow a;
  const std::int64_t hs = oh * g.SH - g.PH, ws = ow * g.SW - g.PW;
  const std::int64_t he = hs + g.KH, we = ws + g.KW;  // inside the padded image
  a.h0 = hs < 0 ? 0 : hs;
  a.w0 = ws < 0 ? 0 : ws;
  a.h1 = he > g.H ? g.H : he;
  a.w1 = we > g.W ? g.W : we;
  a.divisor = include_pad ? (he - hs) * (we - ws) : (a.h1 - a.h0) * (a.w1 - a.w0);
  return a;
}
}  // namespace

namespace {
// The index (0-3, window order) of the maximum of a 2x2 window by PyTorch's
// rule, for the unpadded 2x2 windows of stride 2 almost every CNN uses.
// Which of a 2x2 window's values (v0, v1 / v2, v3 in window order) PyTorch's
// rule picks: s_i says v_i replaces the running maximum (greater, or NaN), so
// the pick is the last i with s_i (0 when none). Written as float selects
// that compilers vectorise, not branches: on training data the comparisons
// are a coin toss, and mispredicted branches made the backward pass slow.
struct Pick4 {
  bool s1, s2, s3;
  template <class T>
  KOKKOS_INLINE_FUNCTION T max(T v0, T v1, T v2, T v3) {
    s1 = (v1 > v0) | (v1 != v1);
    const T m1 = s1 ? v1 : v0;
    s2 = (v2 > m1) | (v2 != v2);
    const T m2 = s2 ? v2 : m1;
    s3 = (v3 > m2) | (v3 != v3);
    return s3 ? v3 : m2;
  }
  // dv at the pick, zeros elsewhere.
  template <class T>
  KOKKOS_INLINE_FUNCTION void route(T dv, T& g0, T& g1, T& g2, T& g3) const {
    g3 = s3 ? dv : T(0);
    const T r3 = s3 ? T(0) : dv;  // left for v0..v2
    g2 = s2 ? r3 : T(0);
    const T r2 = s2 ? T(0) : r3;
    g1 = s1 ? r2 : T(0);
    g0 = s1 ? T(0) : r2;
  }
};
}  // namespace

template <class T>
void Pool2d<T>::forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>&) {
  const Geometry g(window(h_, w_), h_, w_, oh_, ow_);
  const std::int64_t C = static_cast<std::int64_t>(c_);
  const bool is_max = kind_ == PoolKind::max, include_pad = count_include_pad_;
  const bool unpadded = g.PH == 0 && g.PW == 0;
  const bool two_by_two = is_max && unpadded && g.KH == 2 && g.KW == 2 && g.SH == 2 &&
                          g.SW == 2 && g.DH == 1 && g.DW == 1;
  const Window2d win = window(h_, w_);
  // One item per output row (sample, channel, oh).
  for_range(ctx, "strata::Pool2d::forward", x.extent(0) * c_ * oh_, KOKKOS_LAMBDA(const std::size_t item) {
        const std::int64_t i = static_cast<std::int64_t>(item);
        const std::int64_t oh = i % g.OH, bc = i / g.OH, b = bc / C, c = bc % C;
        const T* plane = &x(b, c * g.H * g.W);
        T* out = &y(b, (c * g.OH + oh) * g.OW);
        if (two_by_two) {
          const T* r0 = plane + 2 * oh * g.W;
          const T* r1 = r0 + g.W;
          for (std::int64_t ow = 0; ow < g.OW; ++ow) {
            const T v0 = r0[2 * ow], v1 = r0[2 * ow + 1], v2 = r1[2 * ow], v3 = r1[2 * ow + 1];
            Pick4 pick;
            out[ow] = pick.max(v0, v1, v2, v3);
          }
          return;
        }
        for (std::int64_t ow = 0; ow < g.OW; ++ow) {
          if (is_max) {
            const std::int64_t at = unpadded ? argmax_inside(g, plane, oh, ow) : argmax(g, plane, oh, ow);
            out[ow] = at >= 0 ? plane[at] : T(0);
          } else {
            const AvgWindow a = avg_window(g, oh, ow, include_pad);
            T sum = 0;
            for (std::int64_t ih = a.h0; ih < a.h1; ++ih)
              for (std::int64_t iw = a.w0; iw < a.w1; ++iw) sum += plane[ih * g.W + iw];
            out[ow] = sum / static_cast<T>(a.divisor);
          }
        }
      },
      ow_ * win.kh * win.kw);
}

template <class T>
void Pool2d<T>::backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>& saved) {
  if (dx.data() == nullptr) return;
  const Geometry g(window(h_, w_), h_, w_, oh_, ow_);
  const std::int64_t C = static_cast<std::int64_t>(c_);
  const bool is_max = kind_ == PoolKind::max, include_pad = count_include_pad_;
  const bool unpadded = g.PH == 0 && g.PW == 0;
  const bool two_by_two = is_max && unpadded && g.KH == 2 && g.KW == 2 && g.SH == 2 &&
                          g.SW == 2 && g.DH == 1 && g.DW == 1;
  const Window2d win = window(h_, w_);
  ConstMatrix<T> x = saved.x;
  if (two_by_two) {
    // Windows that do not overlap: one item per output row writes its two
    // input rows whole (the gradient at each window's maximum, zeros
    // elsewhere; the last item also zeros an odd last row).
    for_range(ctx, "strata::Pool2d::backward", dy.extent(0) * c_ * oh_, KOKKOS_LAMBDA(const std::size_t item) {
          const std::int64_t i = static_cast<std::int64_t>(item);
          const std::int64_t oh = i % g.OH, bc = i / g.OH, b = bc / C, c = bc % C;
          const T* r0 = &x(b, c * g.H * g.W) + 2 * oh * g.W;
          const T* r1 = r0 + g.W;
          T* d0 = &dx(b, c * g.H * g.W) + 2 * oh * g.W;
          T* d1 = d0 + g.W;
          const T* d = &dy(b, (c * g.OH + oh) * g.OW);
          for (std::int64_t ow = 0; ow < g.OW; ++ow) {
            Pick4 pick;
            pick.max(r0[2 * ow], r0[2 * ow + 1], r1[2 * ow], r1[2 * ow + 1]);
            pick.route(d[ow], d0[2 * ow], d0[2 * ow + 1], d1[2 * ow], d1[2 * ow + 1]);
          }
          if (g.W % 2 != 0) d0[g.W - 1] = d1[g.W - 1] = T(0);
          if (oh == g.OH - 1)
            for (std::int64_t ih = 2 * g.OH; ih < g.H; ++ih)
              for (std::int64_t iw = 0; iw < g.W; ++iw) d1[(ih - 2 * oh - 1) * g.W + iw] = T(0);
        },
        4 * ow_);
    return;
  }
  // Windows may overlap: one item per (sample, channel) plane.
  for_range(ctx, "strata::Pool2d::backward", dy.extent(0) * c_, KOKKOS_LAMBDA(const std::size_t item) {
        const std::int64_t b = static_cast<std::int64_t>(item) / C, c = static_cast<std::int64_t>(item) % C;
        T* grad = &dx(b, c * g.H * g.W);
        const T* d = &dy(b, c * g.OH * g.OW);
        for (std::int64_t i = 0; i < g.H * g.W; ++i) grad[i] = T(0);
        for (std::int64_t oh = 0; oh < g.OH; ++oh)
          for (std::int64_t ow = 0; ow < g.OW; ++ow) {
            const T dv = d[oh * g.OW + ow];
            if (is_max) {
              const T* plane = &x(b, c * g.H * g.W);
              const std::int64_t i = unpadded ? argmax_inside(g, plane, oh, ow) : argmax(g, plane, oh, ow);
              if (i >= 0) grad[i] += dv;
            } else {
              const AvgWindow a = avg_window(g, oh, ow, include_pad);
              const T share = dv / static_cast<T>(a.divisor);
              for (std::int64_t ih = a.h0; ih < a.h1; ++ih)
                for (std::int64_t iw = a.w0; iw < a.w1; ++iw) grad[ih * g.W + iw] += share;
            }
          }
      },
      h_ * w_ + oh_ * ow_ * win.kh * win.kw);
}

template class Pool2d<float>;
template class Pool2d<double>;
template LayerPtr<float> Pool2d<float>::from_args<PoolKind::max>(LayerArgs&, const Shape&, LayerBuild&);
template LayerPtr<float> Pool2d<float>::from_args<PoolKind::avg>(LayerArgs&, const Shape&, LayerBuild&);
template LayerPtr<float> Pool2d<float>::from_args<PoolKind::global_avg>(LayerArgs&, const Shape&, LayerBuild&);
template LayerPtr<double> Pool2d<double>::from_args<PoolKind::max>(LayerArgs&, const Shape&, LayerBuild&);
template LayerPtr<double> Pool2d<double>::from_args<PoolKind::avg>(LayerArgs&, const Shape&, LayerBuild&);
template LayerPtr<double> Pool2d<double>::from_args<PoolKind::global_avg>(LayerArgs&, const Shape&, LayerBuild&);

}  // namespace strata
