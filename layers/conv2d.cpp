#include "layers/conv2d.hpp"

#include "backends/error.hpp"
#include "backends/launch.hpp"
#include "layers/model_spec.hpp"
#include "layers/registry.hpp"

#include <algorithm>
#include <cstdint>

namespace strata {

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
void Conv2d<T>::reserve(std::size_t batch, std::size_t) {
  const std::size_t rows = chunk_samples(batch) * positions();
  const std::size_t ck = in_ * win_.kh * win_.kw;
  if (col_.extent(0) < rows * ck) col_ = VectorBuffer<T>("strata::Conv2d::col", rows * ck);
  if (yt_.extent(0) < rows * out_) yt_ = VectorBuffer<T>("strata::Conv2d::yt", rows * out_);
}

template <class T>
std::size_t Conv2d<T>::workspace_bytes(std::size_t max_batch) const {
  const std::size_t rows = chunk_samples(max_batch) * positions();
  return rows * (in_ * win_.kh * win_.kw + out_) * sizeof(T);
}

template <class T>
void Conv2d<T>::im2col(Context& ctx, ConstMatrix<T> x, std::size_t first, std::size_t n) const {
  using I = std::int64_t;
  const I C = static_cast<I>(in_), H = static_cast<I>(h_), W = static_cast<I>(w_);
  const I OW = static_cast<I>(ow_), P = static_cast<I>(positions());
  const I KH = static_cast<I>(win_.kh), KW = static_cast<I>(win_.kw);
  const I SH = static_cast<I>(win_.sh), SW = static_cast<I>(win_.sw);
  const I PH = static_cast<I>(win_.ph), PW = static_cast<I>(win_.pw);
  const I DH = static_cast<I>(win_.dh), DW = static_cast<I>(win_.dw);
  const I CK = C * KH * KW, b0 = static_cast<I>(first);
  T* col = col_.data();
  for_range(ctx, "strata::Conv2d::im2col", n * positions(), KOKKOS_LAMBDA(const std::size_t r) {
        const I b = b0 + static_cast<I>(r) / P, p = static_cast<I>(r) % P;
        const I oh = p / OW, ow = p % OW;
        T* row = col + static_cast<I>(r) * CK;
        for (I c = 0; c < C; ++c)
          for (I kh = 0; kh < KH; ++kh) {
            const I ih = oh * SH - PH + kh * DH;
            const bool in_rows = ih >= 0 && ih < H;
            for (I kw = 0; kw < KW; ++kw) {
              const I iw = ow * SW - PW + kw * DW;
              row[(c * KH + kh) * KW + kw] =
                  in_rows && iw >= 0 && iw < W ? x(b, (c * H + ih) * W + iw) : T(0);
            }
          }
      },
      in_ * win_.kh * win_.kw);
}

template <class T>
void Conv2d<T>::col2im(Context& ctx, Matrix<T> dx, std::size_t first, std::size_t n) const {
  using I = std::int64_t;
  const I C = static_cast<I>(in_), H = static_cast<I>(h_), W = static_cast<I>(w_);
  const I OH = static_cast<I>(oh_), OW = static_cast<I>(ow_), P = static_cast<I>(positions());
  const I KH = static_cast<I>(win_.kh), KW = static_cast<I>(win_.kw);
  const I SH = static_cast<I>(win_.sh), SW = static_cast<I>(win_.sw);
  const I PH = static_cast<I>(win_.ph), PW = static_cast<I>(win_.pw);
  const I DH = static_cast<I>(win_.dh), DW = static_cast<I>(win_.dw);
  const I CK = C * KH * KW, b0 = static_cast<I>(first);
  const T* col = col_.data();
  const bool unit = SH == 1 && SW == 1;  // no divisions (the common case)
  // One item per input row (sample, channel, ih); each pixel adds the patch
  // entries that read it, kernel rows and columns in order.
  for_range(ctx, "strata::Conv2d::col2im", n * in_ * h_, KOKKOS_LAMBDA(const std::size_t item) {
        const I i = static_cast<I>(item);
        const I b = i / (C * H), c = (i / H) % C, ih = i % H;
        for (I iw = 0; iw < W; ++iw) {
          T sum = 0;
          for (I kh = 0; kh < KH; ++kh) {
            const I th = ih + PH - kh * DH;  // = oh * SH
            if (th < 0 || (!unit && th % SH != 0)) continue;
            const I oh = unit ? th : th / SH;
            if (oh >= OH) continue;
            for (I kw = 0; kw < KW; ++kw) {
              const I tw = iw + PW - kw * DW;
              if (tw < 0 || (!unit && tw % SW != 0)) continue;
              const I ow = unit ? tw : tw / SW;
              if (ow >= OW) continue;
              sum += col[(b * P + oh * OW + ow) * CK + (c * KH + kh) * KW + kw];
            }
          }
          dx(b0 + b, (c * H + ih) * W + iw) = sum;
        }
      },
      w_ * win_.kh * win_.kw);
}

template <class T>
void Conv2d<T>::forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>&) {
  const std::size_t batch = x.extent(0), chunk = chunk_samples(batch), P = positions();
  const int og = static_cast<int>(out_ / groups_), kg = static_cast<int>(patch());
  const int ck = static_cast<int>(in_ * win_.kh * win_.kw), o = static_cast<int>(out_);
  STRATA_REQUIRE(col_.extent(0) >= chunk * P * static_cast<std::size_t>(ck), runtime, name(),
                 ": forward of ", batch, " samples before reserve()");
  const T* yt = yt_.data();
  const auto bias = b_;
  const bool has_bias = bias_;
  const std::size_t on = out_;
  for (std::size_t first = 0; first < batch; first += chunk) {
    const std::size_t n = std::min(chunk, batch - first);
    im2col(ctx, x, first, n);
    for (std::size_t g = 0; g < groups_; ++g)
      ctx.blas.gemm(Op::N, Op::T, static_cast<int>(n * P), og, kg, T(1), col_.data() + g * kg, ck,
                    weight_.data() + g * og * kg, kg, T(0), yt_.data() + g * og, o);
    // (sample, channel) rows of the NCHW output from the position rows of yt.
    for_range(ctx, "strata::Conv2d::to_nchw", n * out_, KOKKOS_LAMBDA(const std::size_t item) {
          const std::size_t b = item / on, c = item % on;
          const T add = has_bias ? bias(c) : T(0);
          for (std::size_t p = 0; p < P; ++p) y(first + b, c * P + p) = yt[(b * P + p) * on + c] + add;
        },
        P);
  }
}

template <class T>
void Conv2d<T>::backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>& saved) {
  const std::size_t batch = dy.extent(0), chunk = chunk_samples(batch), P = positions();
  const int og = static_cast<int>(out_ / groups_), kg = static_cast<int>(patch());
  const int ck = static_cast<int>(in_ * win_.kh * win_.kw), o = static_cast<int>(out_);
  if (bias_) {  // one item per channel: samples, then positions, in order
    auto db = db_;
    for_range(ctx, "strata::Conv2d::bias_grad", out_, KOKKOS_LAMBDA(const std::size_t c) {
          T acc = 0;
          for (std::size_t b = 0; b < batch; ++b)
            for (std::size_t p = 0; p < P; ++p) acc += dy(b, c * P + p);
          db(c) += acc;
        },
        batch * P);
  }
  T* yt = yt_.data();
  const std::size_t on = out_;
  for (std::size_t first = 0; first < batch; first += chunk) {
    const std::size_t n = std::min(chunk, batch - first);
    const int rows = static_cast<int>(n * P);
    im2col(ctx, saved.x, first, n);
    for_range(ctx, "strata::Conv2d::from_nchw", n * P, KOKKOS_LAMBDA(const std::size_t r) {
          const std::size_t b = first + r / P, p = r % P;
          for (std::size_t c = 0; c < on; ++c) yt[r * on + c] = dy(b, c * P + p);
        },
        out_);
    for (std::size_t g = 0; g < groups_; ++g)
      ctx.blas.gemm(Op::T, Op::N, og, kg, rows, T(1), yt_.data() + g * og, o, col_.data() + g * kg,
                    ck, T(1), dweight_.data() + g * og * kg, kg);
    if (dx.data() == nullptr) continue;
    for (std::size_t g = 0; g < groups_; ++g)
      ctx.blas.gemm(Op::N, Op::N, rows, kg, og, T(1), yt_.data() + g * og, o,
                    weight_.data() + g * og * kg, kg, T(0), col_.data() + g * kg, ck);
    col2im(ctx, dx, first, n);
  }
}

template class Conv2d<float>;
template class Conv2d<double>;

}  // namespace strata
