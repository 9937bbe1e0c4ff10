#include "layers/batchnorm.hpp"

#include "backends/error.hpp"
#include "backends/host_clones.hpp"
#include "backends/lanes.hpp"
#include "backends/launch.hpp"
#include "backends/segment_sums.hpp"
#include "layers/activation.hpp"
#include "layers/activation_functions.hpp"
#include "layers/batch_sums.hpp"
#include "layers/model_spec.hpp"
#include "layers/registry.hpp"

#include <cmath>
#include <type_traits>

namespace strata {

namespace {
// What the elementwise kernels share per (sample, channel) row: the row's
// sample and the offset of its S positions, then the row's constants.
template <class T>
struct NormaliseRow {
  std::size_t b, at;
  T scale, shift;
};
template <class T>
struct InputGradRow {
  std::size_t b, at;
  T k, r, mu, s1, s2;  // gamma rstd, rstd, mean, mean(dy), mean(dy xhat)
  T scale, shift;      // NormaliseRow's (a fused ReLU's derivative)
};

// The normalised value, through the fused ReLU when there is one.
template <class T>
KOKKOS_INLINE_FUNCTION T normalised(T x, T scale, T shift, bool relu) {
  const T v = x * scale + shift;
  return relu ? detail::Relu::f(v) : v;
}
// The gradient reaching the normalised value: dy, or with a fused ReLU dy
// times relu' at the output forward wrote (computed again from x), 1 or 0:
// the bits of ReLU's backward (detail::Relu::df), which read that output.
template <class T>
KOKKOS_INLINE_FUNCTION T grad_in(T dy, T x, T scale, T shift, bool relu) {
  return relu ? dy * detail::Relu::df(T(0), normalised(x, scale, shift, true)) : dy;
}

// The terms of the per-channel sums, for channel c (a segment of
// backends/segment_sums.hpp), sample b and position s: segment_sums over all
// channels and the host's channel items (segment_total) add the same terms.
template <class T>
struct ValueTerm {  // the values
  ConstMatrix<T> x;
  std::size_t S;
  KOKKOS_INLINE_FUNCTION void operator()(std::size_t c, std::size_t b, std::size_t s, double* acc) const {
    acc[0] += static_cast<double>(x(b, c * S + s));
  }
  // Values s .. s + 3 into lanes 0..3 (host: segment_total; backends/lanes.hpp).
  void four(std::size_t c, std::size_t b, std::size_t s, Lanes4* acc) const {
    Lanes4 v;
    load_wide(v, &x(b, c * S + s));
    acc[0] += v;
  }
};
template <class T>
struct SquareTerm {  // their squared deviations from the channel's mean
  ConstMatrix<T> x;
  std::size_t S;
  const double* mean;
  KOKKOS_INLINE_FUNCTION void operator()(std::size_t c, std::size_t b, std::size_t s, double* acc) const {
    const double dev = static_cast<double>(x(b, c * S + s)) - mean[c];
    acc[0] += dev * dev;
  }
  void four(std::size_t c, std::size_t b, std::size_t s, Lanes4* acc) const {
    Lanes4 dev;
    load_wide(dev, &x(b, c * S + s));
    dev = dev - mean[c];
    acc[0] += dev * dev;
  }
};
template <class T>
KOKKOS_INLINE_FUNCTION NormaliseRow<T> normalise_row(std::size_t b, std::size_t c, std::size_t S,
                                                     ConstVector<T> mean, ConstVector<T> rstd,
                                                     ConstVector<T> gamma, ConstVector<T> beta) {
  const T scale = rstd(c) * gamma(c);
  return NormaliseRow<T>{b, c * S, scale, beta(c) - mean(c) * scale};
}

// The two gradient terms of one value: d (beta's gradient) and d xhat
// (gamma's), d the gradient reaching the normalised value (grad_in).
template <class T>
KOKKOS_INLINE_FUNCTION void add_grad_terms(T d, T x, T mean, T rstd, double* acc) {
  const double g = static_cast<double>(d);
  const T xhat = (x - mean) * rstd;  // as input_grad's
  acc[0] += g;
  acc[1] += g * static_cast<double>(xhat);
}
template <class T, bool Relu>
struct GradTerm {  // any channel's
  ConstMatrix<T> dy, x;
  ConstVector<T> mean, rstd, gamma, beta;
  std::size_t S;
  KOKKOS_INLINE_FUNCTION void operator()(std::size_t c, std::size_t b, std::size_t s, double* acc) const {
    const T xv = x(b, c * S + s);
    T d = dy(b, c * S + s);
    if constexpr (Relu) {
      const NormaliseRow<T> r = normalise_row<T>(b, c, S, mean, rstd, gamma, beta);
      d = grad_in(d, xv, r.scale, r.shift, true);
    }
    add_grad_terms(d, xv, mean(c), rstd(c), acc);
  }
};
template <class T, bool Relu>
struct ChannelGradTerm {  // channel c's on a host thread (segment_total), its constants read once
  ConstMatrix<T> dy, x;
  T mean, rstd;
  NormaliseRow<T> n;
  std::size_t S;
  void operator()(std::size_t c, std::size_t b, std::size_t s, double* acc) const {
    const T xv = x(b, c * S + s);
    T d = dy(b, c * S + s);
    // grad_in's product (relu' is 1 or 0, as Relu::df gives it), the
    // factor kept a value (opaque: no jump).
    if constexpr (Relu)
      d = d * static_cast<T>(opaque(static_cast<unsigned>(normalised(xv, n.scale, n.shift, true) > T(0))));
    add_grad_terms(d, xv, mean, rstd, acc);
  }
  // Without a ReLU to apply: positions s .. s + 3 into lanes 0..3, each
  // lane add_grad_terms' arithmetic (backends/lanes.hpp).
  template <bool R = Relu, std::enable_if_t<!R, int> = 0>
  void four(std::size_t c, std::size_t b, std::size_t s, Lanes4* acc) const {
    Lanes4 g, xhat;  // xhat in T, as add_grad_terms', then in double
    load_wide(g, &dy(b, c * S + s));
    if constexpr (std::is_same_v<T, float>) {
      widen(xhat, (load4(&x(b, c * S + s)) - mean) * rstd);
    } else {
      load_wide(xhat, &x(b, c * S + s));
      xhat = (xhat - mean) * rstd;
    }
    acc[0] += g;
    acc[1] += g * xhat;
  }
};

// A channel's statistics from its mean (in double) and the sum of its
// squared deviations: the saved mean and 1 / sqrt(var + eps), and the
// running statistics (unless a recomputing forward).
template <class T>
struct SetStatistics {
  Vector<T> mean, rstd, rm, rv;
  double n, eps;
  T m;
  bool update;
  KOKKOS_INLINE_FUNCTION void operator()(std::size_t c, double mu, double squares) const {
    const double var = squares / n;
    mean(c) = static_cast<T>(mu);
    rstd(c) = static_cast<T>(1.0 / kmath::sqrt(var + eps));
    if (update) {
      rm(c) = (T(1) - m) * rm(c) + m * static_cast<T>(mu);
      rv(c) = (T(1) - m) * rv(c) + m * static_cast<T>(var * (n / (n - 1)));
    }
  }
};

template <class T>
SetStatistics<T> statistics_setter(const Saved<T>& saved, std::size_t C, Vector<T> rm,
                                   Vector<T> rv, double n, double eps, double momentum) {
  return SetStatistics<T>{Vector<T>(saved.scratch.data(), C), Vector<T>(saved.scratch.data() + C, C),
                          rm, rv, n, eps, static_cast<T>(momentum), !saved.recomputing};
}

template <class T>
KOKKOS_INLINE_FUNCTION InputGradRow<T> input_grad_row(std::size_t b, std::size_t c, std::size_t S,
                                                      ConstVector<T> mean, ConstVector<T> rstd,
                                                      ConstVector<T> gamma, ConstVector<T> beta,
                                                      T s1, T s2) {
  const NormaliseRow<T> n = normalise_row<T>(b, c, S, mean, rstd, gamma, beta);
  return InputGradRow<T>{b, c * S, gamma(c) * rstd(c), rstd(c), mean(c), s1, s2, n.scale, n.shift};
}

// The input gradient from dy and x: training (batch statistics) or
// evaluation (running statistics: constants of the channel).
template <class T>
KOKKOS_INLINE_FUNCTION T input_grad(const InputGradRow<T>& w, T dy, T x, bool relu, bool batch_stats) {
  const T d = grad_in(dy, x, w.scale, w.shift, relu);
  if (!batch_stats) return w.k * d;
  const T xhat = (x - w.mu) * w.r;
  return w.k * (d - w.s1 - xhat * w.s2);
}

// One channel of training on host threads (BatchNorm's forward_by_channel
// and backward_by_channel): its statistics or gradient sums (segment_total:
// the bits of segment_sums over all channels), then its output or input
// gradient from the values still in the core's cache. Compiled as
// x86-64-v3 clones with every call inlined (backends/host_clones.hpp): a
// lambda this long is not inlined into run_items' clones, and ran the
// baseline target's code. Relu: a fused ReLU (FusedActivation).
template <class T>
struct ChannelForward {
  ConstMatrix<T> x;
  Matrix<T> y;
  SetStatistics<T> set;
  double* d;  // the channels' means (dsums_)
  ConstVector<T> gamma, beta;
  std::size_t C, batch, S;
  double n;  // values per channel
};
template <class T, bool Relu>
STRATA_HOST_CLONES_FLAT void channel_forward(const ChannelForward<T>& a, std::size_t c) {
  double sum, squares;
  segment_total<1>(ValueTerm<T>{a.x, a.S}, c, a.C, a.batch, a.S, &sum);
  a.d[c] = sum / a.n;
  segment_total<1>(SquareTerm<T>{a.x, a.S, a.d}, c, a.C, a.batch, a.S, &squares);
  a.set(c, a.d[c], squares);
  for (std::size_t b = 0; b < a.batch; ++b) {
    const NormaliseRow<T> r = normalise_row<T>(b, c, a.S, a.set.mean, a.set.rstd, a.gamma, a.beta);
    for (std::size_t s = 0; s < a.S; ++s)
      a.y(b, r.at + s) = normalised(a.x(b, r.at + s), r.scale, r.shift, Relu);
  }
}

template <class T>
struct ChannelBackward {
  ConstMatrix<T> dy, x;
  Matrix<T> dx;  // empty: the parameter gradients alone
  ConstVector<T> mean, rstd, gamma, beta;
  Vector<T> dgamma, dbeta;
  std::size_t C, batch, S;
  double n;  // values per channel
};
template <class T, bool Relu>
STRATA_HOST_CLONES_FLAT void channel_backward(const ChannelBackward<T>& a, std::size_t c) {
  const NormaliseRow<T> n = normalise_row<T>(0, c, a.S, a.mean, a.rstd, a.gamma, a.beta);
  // With a fused ReLU and an input gradient to write: dy through the ReLU
  // into dx first, in one vectorised pass over the channel, and the sums
  // and the input gradient read it there as they read dy (the same values;
  // in the sums' scalar loop each ReLU factor costs a conversion).
  ConstMatrix<T> g = a.dy;
  bool through_relu = Relu;
  if (Relu && a.dx.data() != nullptr) {
    for (std::size_t b = 0; b < a.batch; ++b)
      for (std::size_t s = 0; s < a.S; ++s)
        a.dx(b, n.at + s) = grad_in(a.dy(b, n.at + s), a.x(b, n.at + s), n.scale, n.shift, true);
    g = a.dx;
    through_relu = false;
  }
  double t[2];
  if (through_relu)
    segment_total<2>(ChannelGradTerm<T, true>{g, a.x, a.mean(c), a.rstd(c), n, a.S}, c, a.C, a.batch, a.S, t);
  else
    segment_total<2>(ChannelGradTerm<T, false>{g, a.x, a.mean(c), a.rstd(c), n, a.S}, c, a.C, a.batch, a.S, t);
  a.dbeta(c) += static_cast<T>(t[0]);
  a.dgamma(c) += static_cast<T>(t[1]);
  if (a.dx.data() == nullptr) return;
  const T s1 = static_cast<T>(t[0] / a.n), s2 = static_cast<T>(t[1] / a.n);
  for (std::size_t b = 0; b < a.batch; ++b) {
    const InputGradRow<T> w = input_grad_row<T>(b, c, a.S, a.mean, a.rstd, a.gamma, a.beta, s1, s2);
    for (std::size_t s = 0; s < a.S; ++s)
      a.dx(b, w.at + s) = input_grad(w, g(b, w.at + s), a.x(b, w.at + s), false, true);
  }
}
}  // namespace

template <class T>
BatchNorm<T>::BatchNorm(std::size_t channels, double eps, double momentum, bool sync)
    : channels_(channels), eps_(eps), momentum_(momentum), sync_(sync) {
  STRATA_REQUIRE(channels > 0, config, "BatchNorm: channels must be positive");
  STRATA_REQUIRE(eps > 0, config, "BatchNorm: eps must be positive, got ", eps);
  STRATA_REQUIRE(momentum >= 0 && momentum <= 1, config,
                 "BatchNorm: momentum must lie in [0, 1], got ", momentum);
}

template <class T>
void BatchNorm<T>::reserve(std::size_t batch, std::size_t) {
  allocate();
  workspace(batch * positions());
}

template <class T>
std::size_t BatchNorm<T>::workspace_bytes(std::size_t batch) const {
  return (2 * channels_ + 1) * sizeof(T) +
         (4 * channels_ + 2 + segment_sums_workspace(channels_, batch * positions(), 2)) *
             sizeof(double);
}

template <class T>
void BatchNorm<T>::allocate() {
  if (running_mean_.extent(0) == channels_) return;
  // Here rather than in the constructor: a model is described (--describe)
  // before Kokkos starts.
  running_mean_ = VectorBuffer<T>("strata::BatchNorm::running_mean", channels_);
  running_var_ = VectorBuffer<T>("strata::BatchNorm::running_var", channels_);
  Kokkos::deep_copy(running_var_, T(1));
  sums_ = VectorBuffer<T>("strata::BatchNorm::sums", 2 * channels_ + 1);
  dsums_ = Kokkos::View<double*, MemSpace>("strata::BatchNorm::dsums", 4 * channels_ + 2);
}

template <class T>
LayerPtr<T> BatchNorm<T>::from_args(LayerArgs& args, const Shape& in, LayerBuild& build) {
  return std::make_unique<BatchNorm<T>>(in[0], args.number("eps", 1e-5),
                                        args.number("momentum", 0.1), build.sync_batchnorm);
}

template <class T>
std::string BatchNorm<T>::name() const {
  const std::size_t rank = this->in_shape_.rank();  // 0 until the model sets it
  const std::string kind = sync_ ? "SyncBatchNorm(" : rank == 3 ? "BatchNorm2d(" : rank > 0 ? "BatchNorm1d(" : "BatchNorm(";
  return kind + std::to_string(channels_) + ")";
}

template <class T>
Shape BatchNorm<T>::output_shape(const Shape& in) const {
  STRATA_REQUIRE(in[0] == channels_, config, name(), " expects ", channels_,
                 " channels in the first dimension but gets shape ", in.str());
  return in;
}

template <class T>
void BatchNorm<T>::bind(Vector<T> params, Vector<T> grads) {
  const auto s = this->slices(params, grads);
  gamma_ = s[0].value;
  dgamma_ = s[0].grad;
  beta_ = s[1].value;
  dbeta_ = s[1].grad;
}

template <class T>
std::vector<BufferInfo> BatchNorm<T>::buffer_table() const {
  return {{"running_mean", channels_}, {"running_var", channels_}, {"num_batches_tracked", 1, true, /*integer=*/true}};
}

template <class T>
std::vector<double> BatchNorm<T>::read_buffer(std::size_t k) const {
  if (k == 2) return {static_cast<double>(tracked_)};
  if (running_mean_.extent(0) != channels_) return std::vector<double>(channels_, k == 0 ? 0.0 : 1.0);
  auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(),
                                                  k == 0 ? running_mean_ : running_var_);
  return std::vector<double>(host.data(), host.data() + channels_);
}

template <class T>
void BatchNorm<T>::write_buffer(std::size_t k, const std::vector<double>& values) {
  STRATA_REQUIRE(k <= 2 && values.size() == (k == 2 ? 1 : channels_), runtime, name(), ": buffer ",
                 k, " takes ", k == 2 ? 1 : channels_, " values, got ", values.size());
  if (k == 2) {
    tracked_ = static_cast<std::uint64_t>(values[0]);
    return;
  }
  allocate();
  auto host = Kokkos::create_mirror_view(k == 0 ? running_mean_ : running_var_);
  for (std::size_t i = 0; i < channels_; ++i) host(i) = static_cast<T>(values[i]);
  Kokkos::deep_copy(k == 0 ? running_mean_ : running_var_, host);
}

template <class T>
bool BatchNorm<T>::takes(ActivationKind kind) const {
  return kind == ActivationKind::relu;
}

template <class T>
void BatchNorm<T>::fuse(ActivationKind kind) {
  STRATA_REQUIRE(takes(kind), config, name(), " cannot apply ", to_string(kind), " in its kernels");
  relu_ = true;
}

template <class T>
void BatchNorm<T>::require_values(std::size_t batch, std::size_t positions) const {
  STRATA_REQUIRE(batch * positions > 1, runtime, name(), ": training needs more than one value per ",
                 "channel, got a micro-batch of ", batch, " samples of ", positions,
                 " positions (as PyTorch: use a larger micro-batch)");
}

template <class T>
void BatchNorm<T>::forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>& saved) {
  const std::size_t batch = x.extent(0), C = channels_, S = positions();
  STRATA_REQUIRE(saved.scratch.extent(0) >= 2 * C, runtime, name(), ": ", saved.scratch.extent(0),
                 " saved values, needs ", 2 * C);
  STRATA_REQUIRE(running_mean_.extent(0) == C, runtime, name(), ": forward before reserve()");
  Vector<T> mean(saved.scratch.data(), C), rstd(saved.scratch.data() + C, C);
  const T eps = static_cast<T>(eps_);
  auto rm = running_mean_, rv = running_var_;
  if (saved.training && ctx.reproducible) {
    exact_statistics(ctx, x, saved);
  } else if (saved.training && host_kernels && !synced() &&
             positions() * sizeof(T) >= forward_by_channel_row_bytes) {
    forward_by_channel(ctx, x, y, saved);
    return;
  } else if (saved.training) {
    batch_statistics(ctx, x, saved);
  } else {
    for_range(ctx, "strata::BatchNorm::running", C, KOKKOS_LAMBDA(const std::size_t c) {
      mean(c) = rm(c);
      rstd(c) = T(1) / kmath::sqrt(rv(c) + eps);
    });
  }
  auto gamma = gamma_, beta = beta_;
  const bool relu = relu_;
  for_elements(ctx, "strata::BatchNorm::normalise", batch * C, S,
      KOKKOS_LAMBDA(const std::size_t row) {
        return normalise_row<T>(row / C, row % C, S, mean, rstd, gamma, beta);
      },
      KOKKOS_LAMBDA(const NormaliseRow<T>& r, std::size_t, const std::size_t s) {
        y(r.b, r.at + s) = normalised(x(r.b, r.at + s), r.scale, r.shift, relu);
      });
}

template <class T>
double* BatchNorm<T>::workspace(std::size_t terms) {
  const std::size_t need = segment_sums_workspace(channels_, terms, 2);
  if (work_.extent(0) < need)
    work_ = Kokkos::View<double*, MemSpace>("strata::BatchNorm::work", need);
  return work_.data();
}

// The statistics of the samples this rank holds or, synced, of every rank's
// samples: each channel's sum in double (two-stage, backends/segment_sums.hpp),
// the mean, then the squared deviations from it in double (two passes, as
// PyTorch's CPU kernel; the same arithmetic on every rank count but for the
// order in which the ranks' sums are added).
template <class T>
void BatchNorm<T>::batch_statistics(Context& ctx, ConstMatrix<T> x, Saved<T>& saved) {
  const std::size_t batch = x.extent(0), C = channels_, S = positions();
  const bool synced = group_ != nullptr && group_->size() > 1;
  double* w = workspace(batch * S);
  double* d = dsums_.data();  // sums (C), count (1), squared deviations (C)
  segment_sums<1>(ctx, "strata::BatchNorm::sum_partials", "strata::BatchNorm::sums",
      Terms::contiguous, C, batch, S, w, ValueTerm<T>{x, S},
      KOKKOS_LAMBDA(std::size_t c, const double* t) { d[c] = t[0]; });
  std::size_t n = batch * S;
  if (synced) {
    Kokkos::deep_copy(ctx.exec, Kokkos::subview(dsums_, C), static_cast<double>(n));
    group_->sum_doubles(ctx, Kokkos::View<double*, MemSpace>(dsums_.data(), C + 1));
    double total = 0;
    Kokkos::deep_copy(total, Kokkos::subview(dsums_, C));
    n = static_cast<std::size_t>(total + 0.5);
    STRATA_REQUIRE(n > 1, runtime, name(), ": training needs more than one value per "
                   "channel over the ranks, got ", n, " (use a larger batch)");
    saved.counter = n;
  } else {
    require_values(batch, S);
  }
  const double nd = static_cast<double>(n);
  for_range(ctx, "strata::BatchNorm::means", C, KOKKOS_LAMBDA(const std::size_t c) {
    d[c] = d[c] / nd;
  });
  segment_sums<1>(ctx, "strata::BatchNorm::square_partials", "strata::BatchNorm::squares",
      Terms::contiguous, C, batch, S, w, SquareTerm<T>{x, S, d},
      KOKKOS_LAMBDA(std::size_t c, const double* t) { d[C + 1 + c] = t[0]; });
  if (synced) group_->sum_doubles(ctx, Kokkos::View<double*, MemSpace>(dsums_.data() + C + 1, C));
  const SetStatistics<T> set =
      statistics_setter<T>(saved, C, running_mean_, running_var_, nd, eps_, momentum_);
  for_range(ctx, "strata::BatchNorm::statistics", C, KOKKOS_LAMBDA(const std::size_t c) {
    set(c, d[c], d[C + 1 + c]);
  });
  if (set.update) ++tracked_;
}

// Training on host threads without a group to sum over, for rows of
// forward_by_channel_row_bytes or more: one item per channel computes its
// statistics (segment_total: the bits of segment_sums) and normalises the
// channel's rows right after, while its values are still in the core's cache
// (a channel of W4's first BatchNorm, 128 samples of 28 x 28, is 392 KiB):
// one pass over the input from memory where the kernels one after another
// made three. Shorter rows (W4's second BatchNorm: 784 bytes per sample and
// channel) keep the kernels over all channels, whose partial sums the host
// visits in memory order, row by row (backends/segment_sums.hpp): a
// channel's rows, one per sample, are too short to stream from memory at
// speed (strata-bench-micro batchnorm/fwd, AMD EPYC: docs/benchmarks.md).
template <class T>
void BatchNorm<T>::forward_by_channel(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>& saved) {
  if constexpr (!host_kernels) {
    (void)ctx, (void)x, (void)y, (void)saved;
    Kokkos::abort("strata::BatchNorm::forward_by_channel: host kernels only");
  } else {
    const std::size_t batch = x.extent(0), C = channels_, S = positions();
    require_values(batch, S);
    const double nd = static_cast<double>(batch * S);
    const SetStatistics<T> set =
        statistics_setter<T>(saved, C, running_mean_, running_var_, nd, eps_, momentum_);
    // d: the channels' means.
    const ChannelForward<T> a{x, y, set, dsums_.data(), gamma_, beta_, C, batch, S, nd};
    if (relu_)
      for_range(ctx, "strata::BatchNorm::channel_forward", C,
                [=](const std::size_t c) { channel_forward<T, true>(a, c); }, 3 * batch * S);
    else
      for_range(ctx, "strata::BatchNorm::channel_forward", C,
                [=](const std::size_t c) { channel_forward<T, false>(a, c); }, 3 * batch * S);
    if (set.update) ++tracked_;
  }
}

// Per channel c: exact sums of f(value) over every sample and position of a
// (batch, C S) matrix into e[2 c], e[2 c + 1].
template <class T, class F>
void exact_channel_sums(Context& ctx, const char* name, std::size_t batch, std::size_t C,
                        std::size_t S, double* e, const F& f) {
  for_range(ctx, name, C, KOKKOS_LAMBDA(const std::size_t c) {
        double hi = 0, lo = 0;
        for (std::size_t b = 0; b < batch; ++b)
          for (std::size_t s = 0; s < S; ++s) {
            double h, l;
            exact_split(f(b, c * S + s, c), h, l);
            hi += h;
            lo += l;
          }
        e[2 * c] = hi;
        e[2 * c + 1] = lo;
      },
      batch * S);
}

template <class T>
void BatchNorm<T>::exact_statistics(Context& ctx, ConstMatrix<T> x, Saved<T>& saved) {
  const std::size_t batch = x.extent(0), C = channels_, S = positions();
  double* e = dsums_.data();
  const Kokkos::View<double*, MemSpace> sums(dsums_.data(), 2 * C + 2);
  const Kokkos::View<double*, MemSpace> squares(dsums_.data(), 2 * C);
  const bool group = group_ != nullptr && group_->size() > 1;
  // The sums of the values and, in the last pair, the count; over the group.
  exact_channel_sums<T>(ctx, "strata::BatchNorm::exact_sums", batch, C, S, e,
      KOKKOS_LAMBDA(std::size_t b, std::size_t k, std::size_t) { return static_cast<double>(x(b, k)); });
  const double local_n = static_cast<double>(batch * S);
  Kokkos::deep_copy(ctx.exec, Kokkos::subview(sums, std::make_pair(2 * C, 2 * C + 2)), 0.0);
  Kokkos::deep_copy(ctx.exec, Kokkos::subview(sums, 2 * C), local_n);
  if (group) group_->sum_doubles(ctx, sums);
  ctx.exec.fence();
  double n = 0;
  Kokkos::deep_copy(n, Kokkos::subview(sums, 2 * C));
  const auto global = static_cast<std::size_t>(n);
  STRATA_REQUIRE(global > 1, runtime, name(), ": training needs more than one value per "
                 "channel over the ranks, got ", global, " (use a larger batch)");
  Vector<T> mean(saved.scratch.data(), C), rstd(saved.scratch.data() + C, C);
  for_range(ctx, "strata::BatchNorm::exact_mean", C, KOKKOS_LAMBDA(const std::size_t c) {
    mean(c) = static_cast<T>(exact_value(e[2 * c], e[2 * c + 1]) / n);
  });
  // The squared deviations, each divided by the count (so that their sum,
  // the variance, stays on the grid's scale).
  const double inv = 1.0 / n;
  exact_channel_sums<T>(ctx, "strata::BatchNorm::exact_squares", batch, C, S, e,
      KOKKOS_LAMBDA(std::size_t b, std::size_t k, std::size_t c) {
        const T d = x(b, k) - mean(c);
        return static_cast<double>(d * d) * inv;
      });
  if (group) group_->sum_doubles(ctx, squares);
  const bool update = !saved.recomputing;
  const T m = static_cast<T>(momentum_), eps = static_cast<T>(eps_);
  const T unbias = static_cast<T>(n / (n - 1));
  auto rm = running_mean_, rv = running_var_;
  for_range(ctx, "strata::BatchNorm::exact_statistics", C, KOKKOS_LAMBDA(const std::size_t c) {
    const T var = static_cast<T>(exact_value(e[2 * c], e[2 * c + 1]));
    rstd(c) = T(1) / kmath::sqrt(var + eps);
    if (update) {
      rm(c) = (T(1) - m) * rm(c) + m * mean(c);
      rv(c) = (T(1) - m) * rv(c) + m * var * unbias;
    }
  });
  if (update) ++tracked_;
  saved.counter = global;
}

template <class T>
void BatchNorm<T>::exact_backward_sums(Context& ctx, ConstMatrix<T> dy, const Saved<T>& saved) {
  const ConstMatrix<T> x = saved.x;
  const std::size_t batch = dy.extent(0), C = channels_, S = positions();
  ConstVector<T> mean(saved.scratch.data(), C), rstd(saved.scratch.data() + C, C);
  const ConstVector<T> gamma = gamma_, beta = beta_;
  const bool relu = relu_;
  // This rank's sums of dy and of dy xhat: the gradients of beta and gamma
  // (exactly into their twins), then over the group for the input gradient.
  double* e = dsums_.data();
  double* e2 = dsums_.data() + 2 * C;
  const auto d = KOKKOS_LAMBDA(std::size_t b, std::size_t k, std::size_t c) {
    const NormaliseRow<T> r = normalise_row<T>(b, c, S, mean, rstd, gamma, beta);
    return grad_in(dy(b, k), x(b, k), r.scale, r.shift, relu);
  };
  exact_channel_sums<T>(ctx, "strata::BatchNorm::exact_dbeta", batch, C, S, e,
      KOKKOS_LAMBDA(std::size_t b, std::size_t k, std::size_t c) { return static_cast<double>(d(b, k, c)); });
  exact_channel_sums<T>(ctx, "strata::BatchNorm::exact_dgamma", batch, C, S, e2,
      KOKKOS_LAMBDA(std::size_t b, std::size_t k, std::size_t c) {
        return static_cast<double>(d(b, k, c) * ((x(b, k) - mean(c)) * rstd(c)));
      });
  double* tb = exact_twin(ctx, dbeta_.data(), C);
  double* tg = exact_twin(ctx, dgamma_.data(), C);
  for_range(ctx, "strata::BatchNorm::exact_param_grad", 2 * C, KOKKOS_LAMBDA(const std::size_t i) {
    tb[i] += e[i];
    tg[i] += e2[i];
  });
  if (group_ != nullptr && group_->size() > 1)
    group_->sum_doubles(ctx, Kokkos::View<double*, MemSpace>(dsums_.data(), 4 * C));
  const double n = static_cast<double>(saved.counter);
  Vector<T> sums = sums_;
  for_range(ctx, "strata::BatchNorm::exact_means", C, KOKKOS_LAMBDA(const std::size_t c) {
    sums(c) = static_cast<T>(exact_value(e[2 * c], e[2 * c + 1]) / n);
    sums(C + c) = static_cast<T>(exact_value(e2[2 * c], e2[2 * c + 1]) / n);
  });
}

template <class T>
void BatchNorm<T>::backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>& saved) {
  const ConstMatrix<T> x = saved.x;
  const std::size_t batch = dy.extent(0), C = channels_, S = positions();
  // SyncBatchNorm: the means of dy and dy xhat are over every rank's values
  // (forward kept their count in saved.counter).
  const bool synced = saved.training && group_ != nullptr && group_->size() > 1;
  ConstVector<T> mean(saved.scratch.data(), C), rstd(saved.scratch.data() + C, C);
  auto dgamma = dgamma_, dbeta = dbeta_, gamma = gamma_, beta = beta_;
  const bool relu = relu_;
  Vector<T> sums = sums_;
  if (saved.training && ctx.exact != nullptr) {
    exact_backward_sums(ctx, dy, saved);
  } else if (saved.training && host_kernels && !synced &&
             S * sizeof(T) >= backward_by_channel_row_bytes) {
    backward_by_channel(ctx, dy, dx, saved);
    return;
  } else {
    // Per channel, in double: the sums of dy and dy xhat (beta's and gamma's
    // gradients), then, over the group when synced, their means.
    double* w = workspace(batch * S);
    double* d = dsums_.data();
    const auto param_grad = KOKKOS_LAMBDA(std::size_t c, const double* t) {
      dbeta(c) += static_cast<T>(t[0]);
      dgamma(c) += static_cast<T>(t[1]);
      d[c] = t[0];
      d[C + c] = t[1];
    };
    if (relu)
      segment_sums<2>(ctx, "strata::BatchNorm::grad_partials", "strata::BatchNorm::param_grad",
                      Terms::contiguous, C, batch, S, w,
                      GradTerm<T, true>{dy, x, mean, rstd, gamma, beta, S}, param_grad);
    else
      segment_sums<2>(ctx, "strata::BatchNorm::grad_partials", "strata::BatchNorm::param_grad",
                      Terms::contiguous, C, batch, S, w,
                      GradTerm<T, false>{dy, x, mean, rstd, gamma, beta, S}, param_grad);
    // Every rank takes part, with or without an input gradient to compute.
    if (synced) group_->sum_doubles(ctx, Kokkos::View<double*, MemSpace>(dsums_.data(), 2 * C));
    const double nd = static_cast<double>(synced ? saved.counter : batch * S);
    for_range(ctx, "strata::BatchNorm::grad_means", 2 * C, KOKKOS_LAMBDA(const std::size_t i) {
      sums(i) = static_cast<T>(d[i] / nd);
    });
  }
  if (dx.data() == nullptr) return;
  const bool batch_stats = saved.training;
  for_elements(ctx, "strata::BatchNorm::input_grad", batch * C, S,
      KOKKOS_LAMBDA(const std::size_t row) {
        const std::size_t c = row % C;
        return input_grad_row<T>(row / C, c, S, mean, rstd, gamma, beta, sums(c), sums(C + c));
      },
      KOKKOS_LAMBDA(const InputGradRow<T>& w, std::size_t, const std::size_t s) {
        dx(w.b, w.at + s) = input_grad(w, dy(w.b, w.at + s), x(w.b, w.at + s), relu, batch_stats);
      });
}

// Training on host threads without a group, for rows of a cache line or
// more: one item per channel adds its parameter gradients (segment_total:
// the bits of segment_sums) and computes the channel's input gradient right
// after, from the values just read (faster for both of W4's BatchNorms,
// whose rows are 3136 and 784 bytes; shorter rows, BatchNorm1d's single
// values above all, would have every channel item read each cache line of
// the input again: not measured, so they keep the all-channel kernels).
template <class T>
void BatchNorm<T>::backward_by_channel(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx,
                                       Saved<T>& saved) {
  if constexpr (!host_kernels) {
    (void)ctx, (void)dy, (void)dx, (void)saved;
    Kokkos::abort("strata::BatchNorm::backward_by_channel: host kernels only");
  } else {
    const std::size_t batch = dy.extent(0), C = channels_, S = positions();
    const ChannelBackward<T> a{dy, saved.x, dx, ConstVector<T>(saved.scratch.data(), C),
                               ConstVector<T>(saved.scratch.data() + C, C), gamma_, beta_, dgamma_,
                               dbeta_, C, batch, S, static_cast<double>(batch * S)};
    if (relu_)
      for_range(ctx, "strata::BatchNorm::channel_backward", C,
                [=](const std::size_t c) { channel_backward<T, true>(a, c); }, 4 * batch * S);
    else
      for_range(ctx, "strata::BatchNorm::channel_backward", C,
                [=](const std::size_t c) { channel_backward<T, false>(a, c); }, 4 * batch * S);
  }
}

template class BatchNorm<float>;
template class BatchNorm<double>;

}  // namespace strata
