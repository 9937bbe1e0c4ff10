#include "layers/conv2d.hpp"

#include "backends/error.hpp"
#include "backends/host_clones.hpp"
#include "backends/launch.hpp"
#include "layers/batch_sums.hpp"
#include "layers/conv_unfold.hpp"
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
std::vector<ParamSpec> Conv2d<T>::params() const {
  // PyTorch's fans (torch.nn.init._calculate_fan_in_and_fan_out): fan_in =
  // in / groups x kernel area, fan_out = out x kernel area.
  const double kernel = static_cast<double>(win_.kh * win_.kw);
  const double fan_in = static_cast<double>(patch()), fan_out = static_cast<double>(out_) * kernel;
  std::vector<ParamSpec> t{{"weight", Shape{out_, in_ / groups_, win_.kh, win_.kw}, ParamGroup::decay,
                            ParamInit::weights(fan_in, fan_out)}};
  if (bias_) t.push_back({"bias", Shape{out_}, ParamGroup::no_decay, ParamInit::bias(fan_in)});
  return t;
}

template <class T>
void Conv2d<T>::add_costs(std::vector<LayerCost>& out) const {
  out.push_back(this->cost(2.0 * static_cast<double>(out_) * static_cast<double>(positions()) *
                           static_cast<double>(patch())));
  if (groups_ == 1) out.back().gemm = GemmShape{positions(), out_, patch()};
  else out.back().small_gemms = static_cast<double>(groups_);
}

template <class T>
void Conv2d<T>::bind(Vector<T> params, Vector<T> grads) {
  const auto s = this->slices(params, grads);
  weight_ = s[0].value;
  dweight_ = s[0].grad;
  if (bias_) {
    b_ = s[1].value;
    db_ = s[1].grad;
  }
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

using conv_unfold::ConvGeometry;
using conv_unfold::I;
using conv_unfold::fold_sample;
using conv_unfold::geometry;
using conv_unfold::unfold_sample;

template <class T>
void Conv2d<T>::im2col(Context& ctx, ConstMatrix<T> x, std::size_t first, std::size_t n) const {
  const ConvGeometry g = geometry(win_, in_, h_, w_, oh_, ow_);
  const I K = g.KH * g.KW, P = g.OH * g.OW, N = static_cast<I>(n) * P;
  const I b0 = static_cast<I>(first), nb = static_cast<I>(n);
  T* col = col_.data();
  if constexpr (!host_kernels) {
    // One item per value of col(C K, N): threads of a warp read neighbouring
    // positions of one input plane.
    for_range(ctx, "strata::Conv2d::im2col", n * patch_rows() * positions(),
        KOKKOS_LAMBDA(const std::size_t item) {
          const I i = static_cast<I>(item), ck = i / N, bp = i - ck * N, b = bp / P;
          const I c = ck / K, kh = (ck / g.KW) % g.KH, kw = ck % g.KW;
          col[i] = conv_unfold::unfold_value(g, &x(b0 + b, c * g.H * g.W), kh, kw, bp - b * P);
        });
    return;
  }
  // One item per (patch row (c, kh, kw), sample): a run of P columns.
  for_range(ctx, "strata::Conv2d::im2col", n * patch_rows(), KOKKOS_LAMBDA(const std::size_t item) {
        const I ck = static_cast<I>(item) / nb, b = static_cast<I>(item) % nb;
        const I c = ck / K, kh = (ck / g.KW) % g.KH, kw = ck % g.KW;
        conv_unfold::unfold_row(g, &x(b0 + b, c * g.H * g.W), kh, kw, col + ck * N + b * P);
      },
      oh_ * ow_);
}

template <class T>
void Conv2d<T>::col2im(Context& ctx, Matrix<T> dx, std::size_t first, std::size_t n) const {
  const ConvGeometry g = geometry(win_, in_, h_, w_, oh_, ow_);
  const I K = g.KH * g.KW, P = g.OH * g.OW, N = static_cast<I>(n) * P, b0 = static_cast<I>(first);
  T* col = col_.data();
  if constexpr (!host_kernels) {
    // One item per input pixel (sample, channel, ih, iw): a gather of the
    // patch entries that read it.
    const I HW = g.H * g.W;
    for_range(ctx, "strata::Conv2d::col2im", n * in_ * h_ * w_,
        KOKKOS_LAMBDA(const std::size_t item) {
          const I i = static_cast<I>(item), bc = i / HW, hw = i - bc * HW;
          const I b = bc / g.C, c = bc - b * g.C, ih = hw / g.W;
          dx(b0 + b, c * HW + hw) =
              conv_unfold::fold_value(g, col + c * K * N + b * P, N, ih, hw - ih * g.W);
        });
    return;
  }
  if (g.shifted_plane()) {  // one item per input plane (sample, channel)
    for_range(ctx, "strata::Conv2d::col2im", n * in_, KOKKOS_LAMBDA(const std::size_t item) {
          const I b = static_cast<I>(item) / g.C, c = static_cast<I>(item) % g.C;
          conv_unfold::fold_plane(g, col + c * K * N + b * P, N, &dx(b0 + b, c * g.H * g.W));
        },
        w_ * h_ * win_.kh * win_.kw);
    return;
  }
  // One item per input row (sample, channel, ih).
  for_range(ctx, "strata::Conv2d::col2im", n * in_ * h_, KOKKOS_LAMBDA(const std::size_t item) {
        const I i = static_cast<I>(item);
        const I b = i / (g.C * g.H), c = (i / g.H) % g.C, ih = i % g.H;
        conv_unfold::fold_row(g, col + c * K * N + b * P, N, ih, &dx(b0 + b, (c * g.H + ih) * g.W));
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
  if (bias_)
    add_channel_sums<T>(ctx, "strata::Conv2d::bias_grad_partials", "strata::Conv2d::bias_grad", dy,
                        P, db_);
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

// One sample's unfolding and folding on a host thread, also compiled as an
// x86-64-v3 clone (backends/host_clones.hpp): the same values, in AVX2 lanes
// where the CPU has them (the samples algorithm's items call the BLAS, so
// they run outside run_items and its clones).
namespace {
#define STRATA_CONV_SAMPLE_ROWS(T)                                                       \
  STRATA_HOST_CLONES_FLAT void unfold_on_host(const ConvGeometry& g, const T* x, T* col) { \
    unfold_sample(g, x, col);                                                            \
  }                                                                                      \
  STRATA_HOST_CLONES_FLAT void fold_on_host(const ConvGeometry& g, T* col, T* dx) {        \
    fold_sample(g, col, dx);                                                             \
  }
STRATA_CONV_SAMPLE_ROWS(float)
STRATA_CONV_SAMPLE_ROWS(double)
#undef STRATA_CONV_SAMPLE_ROWS
}  // namespace

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
          unfold_on_host(g, &x(b, 0), col);
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
          unfold_on_host(g, &x(b, 0), col);
          const T* d = &dy(b, 0);
          const T beta = b == blk * per ? T(0) : T(1);
          for (std::size_t gi = 0; gi < groups; ++gi)
            blas.gemm(Op::N, Op::T, og, kg, p, T(1), d + gi * og * P, p, col + gi * kg * P, p,
                      beta, part + gi * og * kg, kg);
          if (!want_dx) continue;
          for (std::size_t gi = 0; gi < groups; ++gi)
            blas.gemm(Op::T, Op::N, kg, p, og, T(1), w + gi * og * kg, kg, d + gi * og * P, p,
                      T(0), col + gi * kg * P, p);
          fold_on_host(g, col, &dx(b, 0));
        }
      },
      per * P * rows * static_cast<std::size_t>(og) * 2);
  // dW += the blocks' parts, in block order: per item a run of kRun weights,
  // each block's part of them added in turn (a loop over the block's
  // contiguous values that vectorises; one item per weight read the 32
  // parts 72 KiB apart, a page each, and took 4% of W4's conv2 backward).
  T* dw = dweight_.data();
  constexpr std::size_t kRun = 64;
  for_range(ctx, "strata::Conv2d::sum_parts", (nw + kRun - 1) / kRun, KOKKOS_LAMBDA(const std::size_t r) {
        const std::size_t i0 = r * kRun, n = nw - i0 < kRun ? nw - i0 : kRun;
        T acc[kRun];
        for (std::size_t i = 0; i < n; ++i) acc[i] = dw[i0 + i];
        for (std::size_t blk = 0; blk < blocks; ++blk)
          for (std::size_t i = 0; i < n; ++i) acc[i] += parts[blk * nw + i0 + i];
        for (std::size_t i = 0; i < n; ++i) dw[i0 + i] = acc[i];
      },
      blocks * kRun);
}

template class Conv2d<float>;
template class Conv2d<double>;

}  // namespace strata
