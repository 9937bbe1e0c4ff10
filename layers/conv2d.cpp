#include "layers/conv2d.hpp"

#include "backends/error.hpp"
#include "backends/launch.hpp"
#include "layers/batch_sums.hpp"
#include "layers/model_spec.hpp"
#include "layers/registry.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace strata {

namespace {
// A (sample, channel) run of P values between the NCHW layout and the
// channels-as-rows layout of the GEMMs, with the bias to add.
template <class T>
struct ChannelRun {
  const T* src;
  T* dst;
  T add;
};
}  // namespace

// Host: 2^20 values (4 MiB of float) per chunk; device: 2^23 (32 MiB).
template <class T>
const std::size_t Conv2d<T>::default_workspace_limit =
    host_kernels ? std::size_t(1) << 20 : std::size_t(1) << 23;

template <class T>
Conv2d<T>::Conv2d(std::size_t in_channels, std::size_t out_channels, const Window2d& window,
                  std::size_t groups, bool bias)
    : in_(in_channels), out_(out_channels), groups_(groups), win_(window), bias_(bias) {
  STRATA_REQUIRE(in_ > 0 && out_ > 0 && groups_ > 0, config, "Conv2d(", in_, ", ", out_,
                 ", groups ", groups_, "): channels and groups must be positive");
  STRATA_REQUIRE(in_ % groups_ == 0 && out_ % groups_ == 0, config, "Conv2d(", in_, ", ", out_,
                 "): ", in_ % groups_ != 0 ? "input" : "output", " channels (",
                 in_ % groups_ != 0 ? in_ : out_, ") do not divide by groups (", groups_, ")");
  STRATA_REQUIRE(win_.kh > 0 && win_.kw > 0 && win_.sh > 0 && win_.sw > 0 && win_.dh > 0 &&
                     win_.dw > 0,
                 config, "Conv2d: kernel, stride and dilation must be positive");
  STRATA_REQUIRE(patch() <= Shape::max_numel / out_, config, name(), ": more than ",
                 Shape::max_numel, " weights");
}

template <class T>
LayerPtr<T> Conv2d<T>::from_args(LayerArgs& args, const Shape& in, LayerBuild&) {
  STRATA_REQUIRE(in.rank() == 3, config,
                 "conv2d expects images of shape {channels, height, width} but gets shape ",
                 in.str(), " (give the model's input as [channels, height, width])");
  const std::size_t out = args.positive("out");
  const Window2d w = Window2d::from_args(args, {1, 1});
  return std::make_unique<Conv2d<T>>(in[0], out, w, args.positive("groups", 1),
                                     args.flag("bias", true));
}

template <class T>
std::string Conv2d<T>::name() const {
  return "Conv2d(" + std::to_string(in_) + ", " + std::to_string(out_) + ", " + win_.str() +
         (groups_ != 1 ? ", groups " + std::to_string(groups_) : "") +
         (bias_ ? ")" : ", bias=false)");
}

template <class T>
Shape Conv2d<T>::output_shape(const Shape& in) const {
  win_.check_input(name(), in);
  STRATA_REQUIRE(in[0] == in_, config, name(), " expects ", in_, " input channels but gets shape ",
                 in.str());
  return Shape{out_, win_.out_h(in[1]), win_.out_w(in[2])};
}

template <class T>
void Conv2d<T>::set_input_shape(const Shape& in) {
  const Shape out = output_shape(in);
  Layer<T>::set_input_shape(in);
  h_ = in[1], w_ = in[2], oh_ = out[1], ow_ = out[2];
}

template <class T>
std::vector<ParamInfo> Conv2d<T>::param_table() const {
  std::vector<ParamInfo> t{
      {"weight", Shape{out_, in_ / groups_, win_.kh, win_.kw}, 0, ParamGroup::decay}};
  if (bias_) t.push_back({"bias", Shape{out_}, weights(), ParamGroup::no_decay});
  return t;
}

template <class T>
double Conv2d<T>::flops() const {
  return 2.0 * static_cast<double>(out_) * static_cast<double>(positions()) *
         static_cast<double>(patch());
}

template <class T>
void Conv2d<T>::bind(Vector<T> params, Vector<T> grads) {
  const auto w = Kokkos::make_pair(std::size_t(0), weights());
  weight_ = Kokkos::subview(params, w);
  dweight_ = Kokkos::subview(grads, w);
  if (bias_) {
    const auto b = Kokkos::make_pair(weights(), weights() + out_);
    b_ = Kokkos::subview(params, b);
    db_ = Kokkos::subview(grads, b);
  }
}

template <class T>
void Conv2d<T>::init(HostVector<T> params, Init scheme, std::uint64_t seed,
                     std::uint64_t layer_index) const {
  // PyTorch's fans (torch.nn.init._calculate_fan_in_and_fan_out): fan_in =
  // in / groups x kernel area, fan_out = out x kernel area.
  const double kernel = static_cast<double>(win_.kh * win_.kw);
  detail::init_dense(params, scheme, seed, layer_index, weights(), static_cast<double>(patch()),
                     static_cast<double>(out_) * kernel, bias_ ? out_ : 0);
}

template <class T>
std::size_t Conv2d<T>::chunk_samples(std::size_t batch) const {
  const std::size_t per_sample = positions() * std::max(in_ * win_.kh * win_.kw, out_);
  const std::size_t chunk = std::max<std::size_t>(1, workspace_limit_ / std::max<std::size_t>(per_sample, 1));
  return std::min(chunk, std::max<std::size_t>(batch, 1));
}

template <class T>
std::size_t Conv2d<T>::sample_blocks(std::size_t batch) {
  const std::size_t b = std::max<std::size_t>(batch, 1);
  const std::size_t per = (b + max_sample_blocks - 1) / max_sample_blocks;
  return (b + per - 1) / per;
}

ConvAlgorithm default_conv_algorithm() {
  static const ConvAlgorithm a = [] {
    const char* v = std::getenv("STRATA_CONV_ALGORITHM");
    const std::string s = v != nullptr ? v : "";
    if (s.empty() || s == "auto") return ConvAlgorithm::automatic;
    if (s == "chunks") return ConvAlgorithm::chunks;
    if (s == "samples") return ConvAlgorithm::samples;
    STRATA_THROW(config, "STRATA_CONV_ALGORITHM='", s, "': expected auto, chunks or samples");
  }();
  return a;
}

template <class T>
bool Conv2d<T>::samples_possible() const {
  return host_kernels && algorithm_ != ConvAlgorithm::chunks &&
         Blas::vendor_sequential_in_kernels();
}

template <class T>
bool Conv2d<T>::runs_samples(const Context& ctx, std::size_t batch) const {
  return samples_possible() && ctx.blas.sequential_in_kernels() &&
         col_.extent(0) >= sample_blocks(batch) * patch_rows() * positions() &&
         parts_.extent(0) >= sample_blocks(batch) * weights();
}

template <class T>
typename Conv2d<T>::Workspace Conv2d<T>::workspace(std::size_t batch) const {
  const std::size_t cols = chunk_samples(batch) * positions();
  Workspace w{cols * patch_rows(), cols * out_, 0};
  if (samples_possible()) {
    w.col = std::max(w.col, sample_blocks(batch) * patch_rows() * positions());
    w.parts = sample_blocks(batch) * weights();
  }
  return w;
}

template <class T>
void Conv2d<T>::reserve(std::size_t batch, std::size_t) {
  const Workspace w = workspace(batch);
  if (col_.extent(0) < w.col) col_ = VectorBuffer<T>("strata::Conv2d::col", w.col);
  if (yt_.extent(0) < w.yt) yt_ = VectorBuffer<T>("strata::Conv2d::yt", w.yt);
  if (parts_.extent(0) < w.parts) parts_ = VectorBuffer<T>("strata::Conv2d::dw_parts", w.parts);
}

template <class T>
std::size_t Conv2d<T>::workspace_bytes(std::size_t max_batch) const {
  const Workspace w = workspace(max_batch);
  return (w.col + w.yt + w.parts) * sizeof(T);
}

namespace {
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

ConvGeometry geometry(const Window2d& w, std::size_t c, std::size_t h, std::size_t wd,
                      std::size_t oh, std::size_t ow) {
  return {static_cast<I>(c),    static_cast<I>(h),    static_cast<I>(wd),   static_cast<I>(oh),
          static_cast<I>(ow),   static_cast<I>(w.kh), static_cast<I>(w.kw), static_cast<I>(w.sh),
          static_cast<I>(w.sw), static_cast<I>(w.ph), static_cast<I>(w.pw), static_cast<I>(w.dh),
          static_cast<I>(w.dw)};
}

// Zeros the columns of rows [r0, r1) of a patch row outside [lo, hi).
template <class T>
KOKKOS_INLINE_FUNCTION void zero_outside(const ConvGeometry& g, T* out, I r0, I r1, I lo, I hi) {
  if (lo == 0 && hi == g.OW) return;
  for (I oh = r0; oh < r1; ++oh) {
    T* row = out + oh * g.OW;
    for (I i = 0; i < lo; ++i) row[i] = T(0);
    for (I i = hi; i < g.OW; ++i) row[i] = T(0);
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
    for (I ow = 0; ow < lo; ++ow) out[ow] = T(0);
    if (g.SW == 1)
      for (I ow = lo; ow < hi; ++ow) out[ow] = plane[base + ow];
    else
      for (I ow = lo; ow < hi; ++ow) out[ow] = plane[base + ow * g.SW];
    for (I ow = hi; ow < g.OW; ++ow) out[ow] = T(0);
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
}  // namespace

template <class T>
void Conv2d<T>::im2col(Context& ctx, ConstMatrix<T> x, std::size_t first, std::size_t n) const {
  const ConvGeometry g = geometry(win_, in_, h_, w_, oh_, ow_);
  const I K = g.KH * g.KW, P = g.OH * g.OW, N = static_cast<I>(n) * P;
  const I b0 = static_cast<I>(first), nb = static_cast<I>(n);
  T* col = col_.data();
  // One item per (patch row (c, kh, kw), sample): a run of P columns.
  for_range(ctx, "strata::Conv2d::im2col", n * patch_rows(), KOKKOS_LAMBDA(const std::size_t item) {
        const I ck = static_cast<I>(item) / nb, b = static_cast<I>(item) % nb;
        const I c = ck / K, kh = (ck / g.KW) % g.KH, kw = ck % g.KW;
        unfold_row(g, &x(b0 + b, c * g.H * g.W), kh, kw, col + ck * N + b * P);
      },
      oh_ * ow_);
}

template <class T>
void Conv2d<T>::col2im(Context& ctx, Matrix<T> dx, std::size_t first, std::size_t n) const {
  const ConvGeometry g = geometry(win_, in_, h_, w_, oh_, ow_);
  const I K = g.KH * g.KW, P = g.OH * g.OW, N = static_cast<I>(n) * P, b0 = static_cast<I>(first);
  T* col = col_.data();
  if (g.shifted_plane()) {  // one item per input plane (sample, channel)
    for_range(ctx, "strata::Conv2d::col2im", n * in_, KOKKOS_LAMBDA(const std::size_t item) {
          const I b = static_cast<I>(item) / g.C, c = static_cast<I>(item) % g.C;
          fold_plane(g, col + c * K * N + b * P, N, &dx(b0 + b, c * g.H * g.W));
        },
        w_ * h_ * win_.kh * win_.kw);
    return;
  }
  // One item per input row (sample, channel, ih).
  for_range(ctx, "strata::Conv2d::col2im", n * in_ * h_, KOKKOS_LAMBDA(const std::size_t item) {
        const I i = static_cast<I>(item);
        const I b = i / (g.C * g.H), c = (i / g.H) % g.C, ih = i % g.H;
        fold_row(g, col + c * K * N + b * P, N, ih, &dx(b0 + b, (c * g.H + ih) * g.W));
      },
      w_ * win_.kh * win_.kw);
}

template <class T>
void Conv2d<T>::forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>&) {
  const std::size_t batch = x.extent(0), P = positions();
  if (runs_samples(ctx, batch)) {
    forward_samples(ctx, x, y);
    return;
  }
  const std::size_t chunk = chunk_samples(batch);
  const int og = static_cast<int>(out_ / groups_), kg = static_cast<int>(patch());
  STRATA_REQUIRE(col_.extent(0) >= chunk * P * patch_rows(), runtime, name(), ": forward of ",
                 batch, " samples before reserve()");
  const T* yt = yt_.data();
  const auto bias = b_;
  const bool has_bias = bias_;
  const std::size_t on = out_;
  for (std::size_t first = 0; first < batch; first += chunk) {
    const std::size_t n = std::min(chunk, batch - first), N = n * P;
    const int cols = static_cast<int>(N);
    im2col(ctx, x, first, n);
    // yt(O, n P) = W col: one GEMM per group.
    for (std::size_t g = 0; g < groups_; ++g)
      ctx.blas.gemm(Op::N, Op::N, og, cols, kg, T(1), weight_.data() + g * og * kg, kg,
                    col_.data() + g * kg * N, cols, T(0), yt_.data() + g * og * N, cols);
    // The (sample, channel) rows of the NCHW output: runs of P values, one
    // item per value on a device.
    for_elements(ctx, "strata::Conv2d::to_nchw", n * out_, P,
        KOKKOS_LAMBDA(const std::size_t row) {
          const std::size_t b = row / on, c = row % on;
          return ChannelRun<T>{yt + c * N + b * P, &y(first + b, c * P), has_bias ? bias(c) : T(0)};
        },
        KOKKOS_LAMBDA(const ChannelRun<T>& r, std::size_t, const std::size_t p) {
          r.dst[p] = r.src[p] + r.add;
        });
  }
}

template <class T>
void Conv2d<T>::backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>& saved) {
  const std::size_t batch = dy.extent(0), P = positions();
  if (bias_)  // one item per channel: samples, then positions, in order
    add_row_sums<T>(ctx, "strata::Conv2d::bias_grad", batch * P, db_,
        KOKKOS_LAMBDA(const std::size_t i, const std::size_t c) {
          return dy(i / P, c * P + i % P);
        });
  if (runs_samples(ctx, batch)) {
    backward_samples(ctx, saved.x, dy, dx);
    return;
  }
  std::size_t chunk = chunk_samples(batch);
  if (ctx.exact != nullptr) {
    // --reproducible: the weight gradient's chains run over whole chunks of
    // ctx.exact->chunk samples, so the patches of whole chunks at a time.
    const std::size_t c = ctx.exact->chunk;
    STRATA_REQUIRE(chunk >= c || chunk == batch, config, name(), ": --chunk ", c,
                   " samples do not fit its patch workspace of ", chunk,
                   " samples; give a smaller --chunk");
    chunk = std::max(c, chunk / c * c);
  }
  const int og = static_cast<int>(out_ / groups_), kg = static_cast<int>(patch());
  T* yt = yt_.data();
  const std::size_t on = out_;
  for (std::size_t first = 0; first < batch; first += chunk) {
    const std::size_t n = std::min(chunk, batch - first), N = n * P;
    const int cols = static_cast<int>(N);
    im2col(ctx, saved.x, first, n);
    // dyt(O, n P): the chunk's output gradient with channels as rows.
    for_elements(ctx, "strata::Conv2d::from_nchw", n * out_, P,
        KOKKOS_LAMBDA(const std::size_t row) {
          const std::size_t b = row / on, c = row % on;
          return ChannelRun<T>{&dy(first + b, c * P), yt + c * N + b * P, T(0)};
        },
        KOKKOS_LAMBDA(const ChannelRun<T>& r, std::size_t, const std::size_t p) {
          r.dst[p] = r.src[p];
        });
    // dW(O, C K) += dyt col^T, per group.
    for (std::size_t g = 0; g < groups_; ++g)
      add_gemm_grad<T>(ctx, n, Op::N, Op::T, og, kg, cols, yt_.data() + g * og * N, cols,
                       col_.data() + g * kg * N, cols, dweight_.data() + g * og * kg);
    if (dx.data() == nullptr) continue;
    // dcol(C K, n P) = W^T dyt, per group, into col's buffer; then folded.
    for (std::size_t g = 0; g < groups_; ++g)
      ctx.blas.gemm(Op::T, Op::N, kg, cols, og, T(1), weight_.data() + g * og * kg, kg,
                    yt_.data() + g * og * N, cols, T(0), col_.data() + g * kg * N, cols);
    col2im(ctx, dx, first, n);
  }
}

// ---------------------------------------------------------------- samples
// Each block of samples on one host thread, with the sequential BLAS on that
// thread: per sample, its patch matrix col(C K, P) in the block's workspace
// (a few hundred KiB, in the core's own cache), y(b) = W col straight into the
// NCHW output (a sample's (O, P) is what the GEMM writes), and backward
// dW_block += dy(b) col^T, dcol = W^T dy(b), dx(b) = fold(dcol). The blocks'
// weight gradients are then added in block order: the blocks depend on the
// batch alone, so the bits do not depend on the thread count.

template <class T>
void Conv2d<T>::forward_samples(Context& ctx, ConstMatrix<T> x, Matrix<T> y) {
  const ConvGeometry g = geometry(win_, in_, h_, w_, oh_, ow_);
  const std::size_t batch = x.extent(0), blocks = sample_blocks(batch);
  if (batch == 0) return;  // an empty shard
  const std::size_t per = (batch + blocks - 1) / blocks, P = positions(), rows = patch_rows();
  const int og = static_cast<int>(out_ / groups_), kg = static_cast<int>(patch());
  const int p = static_cast<int>(P);
  const Blas& blas = ctx.blas;
  const T* w = weight_.data();
  const T* bias = bias_ ? b_.data() : nullptr;
  T* ws = col_.data();
  const std::size_t on = out_, groups = groups_;
  for_host_items(ctx, "strata::Conv2d::forward_samples", blocks, [=, &blas](const std::size_t blk) {
        T* col = ws + blk * rows * P;
        for (std::size_t b = blk * per; b < std::min(batch, (blk + 1) * per); ++b) {
          unfold_sample(g, &x(b, 0), col);
          T* out = &y(b, 0);
          for (std::size_t gi = 0; gi < groups; ++gi)
            blas.gemm(Op::N, Op::N, og, p, kg, T(1), w + gi * og * kg, kg, col + gi * kg * P, p,
                      T(0), out + gi * og * P, p);
          if (bias != nullptr)
            for (std::size_t o = 0; o < on; ++o)
              for (std::size_t q = 0; q < P; ++q) out[o * P + q] += bias[o];
        }
      },
      per * P * (rows + on) * static_cast<std::size_t>(kg));
}

template <class T>
void Conv2d<T>::backward_samples(Context& ctx, ConstMatrix<T> x, ConstMatrix<T> dy,
                                 Matrix<T> dx) {
  const ConvGeometry g = geometry(win_, in_, h_, w_, oh_, ow_);
  const std::size_t batch = dy.extent(0), blocks = sample_blocks(batch);
  if (batch == 0) return;  // an empty shard adds nothing (block 0's part is stale)
  const std::size_t per = (batch + blocks - 1) / blocks, P = positions(), rows = patch_rows();
  const int og = static_cast<int>(out_ / groups_), kg = static_cast<int>(patch());
  const int p = static_cast<int>(P);
  const std::size_t nw = weights(), groups = groups_;
  const Blas& blas = ctx.blas;
  const T* w = weight_.data();
  T* ws = col_.data();
  T* parts = parts_.data();
  const bool want_dx = dx.data() != nullptr;
  for_host_items(ctx, "strata::Conv2d::backward_samples", blocks, [=, &blas](const std::size_t blk) {
        T* col = ws + blk * rows * P;
        T* part = parts + blk * nw;
        const std::size_t b_end = std::min(batch, (blk + 1) * per);
        for (std::size_t b = blk * per; b < b_end; ++b) {
          unfold_sample(g, &x(b, 0), col);
          const T* d = &dy(b, 0);
          const T beta = b == blk * per ? T(0) : T(1);
          for (std::size_t gi = 0; gi < groups; ++gi)
            blas.gemm(Op::N, Op::T, og, kg, p, T(1), d + gi * og * P, p, col + gi * kg * P, p,
                      beta, part + gi * og * kg, kg);
          if (!want_dx) continue;
          for (std::size_t gi = 0; gi < groups; ++gi)
            blas.gemm(Op::T, Op::N, kg, p, og, T(1), w + gi * og * kg, kg, d + gi * og * P, p,
                      T(0), col + gi * kg * P, p);
          fold_sample(g, col, &dx(b, 0));
        }
      },
      per * P * rows * static_cast<std::size_t>(og) * 2);
  // dW += the blocks' parts, in block order.
  auto dw = dweight_;
  for_range(ctx, "strata::Conv2d::sum_parts", nw, KOKKOS_LAMBDA(const std::size_t i) {
        T acc = dw(i);
        for (std::size_t blk = 0; blk < blocks; ++blk) acc += parts[blk * nw + i];
        dw(i) = acc;
      },
      blocks);
}

template class Conv2d<float>;
template class Conv2d<double>;

}  // namespace strata
