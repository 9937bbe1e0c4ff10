// strata-bench-micro: Google Benchmark micro-benchmarks of Strata's kernels at
// the shapes of the workloads of docs/benchmarks.md (W1 tutorial, W2 MLP, W3 wide):
//   gemm/<vendor|portable>/<NT|TN|NN>/<W>/<m>x<n>x<k>  the step's GEMMs: forward
//       y = x W^T (NT), weight gradient dW += dy^T x (TN), input gradient
//       dx = dy W (NN, not for the first layer); FLOP/s = 2mnk / time
//   linear/<fwd|bwd>/<W>/L<i>/<batch>x<in>x<out>   Linear with bias (FLOP/s)
//   <relu|gelu|tanh|sigmoid|dropout|layernorm>/<fwd|bwd>/<W>/<batch>x<hidden>
//       on the first hidden layer's activations (bytes/s: minimum traffic)
//   loss/<ce|mse>/<W>/<batch>x<classes>           forward and gradient (bytes/s)
//   opt/<sgd|sgd-momentum|adam|adamw>/<W>/<n>      one step over the flat buffers
//       of the workload's n parameters (bytes/s)
//   gemm/reproducible/...  the fixed-order GEMM of --reproducible
//       (backends/gemm_reproducible.hpp)
//   gemm/inline/...  GEMMs small enough that Strata runs them as plain loops
//       (backends/blas.hpp inline_gemm_limit); gemm/vendor and gemm/portable
//       time the backend itself at every shape
//   batchnorm[+relu]/<fwd|bwd>/W4/<batch>x<C>x<H>x<W>  BatchNorm2d in training
//       at the CNN's two shapes, alone or with the ReLU after it fused into
//       its kernels (bytes/s: minimum traffic)
//   conv2d/<samples|chunks>/<fwd|bwd|wts>/W4/<batch>x<C>x<H>x<W>x<O>  W4's two
//       3x3 convolutions by each host algorithm; bwd with the input gradient,
//       wts without (FLOP/s = the GEMMs' 2 P O C K per sample and product)
//   attention/<fwd|bwd>/W5/<batch>x<T>x<heads>x<head size>  CausalAttention at
//       gpt-mini's shape (FLOP/s: the GEMM products of its causal tiles)
//   launch/<kernel|inline>/<n>   y += a x on n floats as a Kokkos kernel on all
//       threads or inline on the calling thread (backends/launch.hpp)
// Every benchmark measures wall-clock time (UseRealTime) and fences the
// execution space after each iteration. The names carry the workload, so
// --benchmark_filter=/W2/ runs one workload (ctest runs /W1/, the tiny one).
#include "apps/common/app_main.hpp"
#include "backends/blas.hpp"
#include "backends/context.hpp"
#include "backends/launch.hpp"
#include "backends/runtime.hpp"
#include "benchmarks/common/bench_utils.hpp"
#include "benchmarks/common/workloads.hpp"
#include "layers/activation.hpp"
#include "layers/attention.hpp"
#include "layers/batchnorm.hpp"
#include "layers/conv2d.hpp"
#include "layers/dropout.hpp"
#include "layers/layernorm.hpp"
#include "layers/linear.hpp"
#include "layers/loss.hpp"
#include "layers/optimizer.hpp"

#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace strata::bench {
namespace {

using T = float;

std::size_t num_params(const Workload& w) {
  std::size_t n = 0;
  for (std::size_t i = 0; i + 1 < w.widths.size(); ++i)
    n += w.widths[i] * w.widths[i + 1] + w.widths[i + 1];
  return n;
}

std::string dims(std::initializer_list<long> d) {
  std::string s;
  for (long v : d) s += (s.empty() ? "" : "x") + std::to_string(v);
  return s;
}

// Deterministic values in [-0.5, 0.5) (no denormals, no NaNs).
void fill(Context& ctx, T* p, std::size_t n, unsigned salt) {
  Kokkos::parallel_for("strata::bench::fill", Range(ctx.exec, 0, n), KOKKOS_LAMBDA(const std::size_t i) {
    const unsigned h = static_cast<unsigned>(i) * 2654435761u + salt * 40503u;
    p[i] = static_cast<T>((h >> 8) & 0xffff) / T(65536) - T(0.5);
  });
}

MatrixBuffer<T> matrix(Context& ctx, const char* label, int rows, int cols, unsigned salt) {
  MatrixBuffer<T> m(std::string(label), static_cast<std::size_t>(rows), static_cast<std::size_t>(cols));
  fill(ctx, m.data(), m.size(), salt);
  return m;
}

void set_flops(benchmark::State& state, double flops_per_iteration) {
  state.counters["FLOP/s"] = benchmark::Counter(flops_per_iteration, benchmark::Counter::kIsIterationInvariantRate);
}

void set_bytes(benchmark::State& state, double bytes_per_iteration) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes_per_iteration));
}

// Runs `op` once untimed (first touch, lazy set-up), then times it with a
// fence after every call; errors become a skipped benchmark.
template <class Op>
void timed(benchmark::State& state, Context& ctx, Op&& op) {
  try {
    op();
    ctx.exec.fence();
    for (auto _ : state) {
      op();
      ctx.exec.fence();
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

benchmark::internal::Benchmark* reg(const std::string& name, std::function<void(benchmark::State&)> f) {
  return benchmark::RegisterBenchmark(name.c_str(), std::move(f))
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
}

// Times one layer's forward (or, after one forward, its backward) on the
// given buffers, with the saved scratch the layer asks for; dx may be empty
// (a first layer computes no input gradient).
void time_layer(benchmark::State& state, Context& ctx, Layer<T>& layer, std::size_t batch,
                Matrix<T> x, Matrix<T> y, Matrix<T> dy, Matrix<T> dx, bool backward) {
  VectorBuffer<T> scratch("saved", layer.saved_size(batch));
  Saved<T> saved;
  saved.x = x;
  saved.y = y;
  saved.scratch = scratch;
  layer.forward(ctx, x, y, saved);
  if (backward)
    timed(state, ctx, [&] { layer.backward(ctx, dy, dx, saved); });
  else
    timed(state, ctx, [&] { layer.forward(ctx, x, y, saved); });
}

// ------------------------------------------------------------------ GEMM
struct GemmShape {
  Op ta, tb;
  int m, n, k;
  const char* kind;  // NT, TN, NN
  bool operator<(const GemmShape& o) const {
    return std::tie(ta, tb, m, n, k) < std::tie(o.ta, o.tb, o.m, o.n, o.k);
  }
};

// The GEMMs of one training step of `w`, without duplicates (W3's four
// 4096x4096 layers share their shapes).
std::vector<GemmShape> gemm_shapes(const Workload& w) {
  std::set<GemmShape> seen;
  std::vector<GemmShape> out;
  auto add = [&](GemmShape s) {
    if (seen.insert(s).second) out.push_back(s);
  };
  for (std::size_t i = 0; i + 1 < w.widths.size(); ++i) {
    const int b = static_cast<int>(w.batch), in = static_cast<int>(w.widths[i]), o = static_cast<int>(w.widths[i + 1]);
    add({Op::N, Op::T, b, o, in, "NT"});  // y(b, out) = x(b, in) W(out, in)^T
    add({Op::T, Op::N, o, in, b, "TN"});  // dW(out, in) += dy(b, out)^T x(b, in)
    if (i > 0) add({Op::N, Op::N, b, in, o, "NN"});  // dx(b, in) = dy(b, out) W(out, in)
  }
  return out;
}

// `inline_small`: GEMMs below inline_gemm_limit run as Strata runs them, as
// plain loops ("gemm/inline/..."); otherwise the backend itself is timed.
// `reproducible`: the fixed-order GEMM of --reproducible ("gemm/reproducible/...").
void register_gemm(const Workload& w, GemmBackend backend, bool inline_small = false,
                   bool reproducible = false) {
  for (const GemmShape& s : gemm_shapes(w)) {
    if (inline_small && !gemm_runs_inline(s.m, s.n, s.k)) continue;
    const std::string kind = reproducible ? "reproducible" : inline_small ? "inline" : to_string(backend);
    const std::string name = "gemm/" + kind + "/" + s.kind + "/" + w.name + "/" + dims({s.m, s.n, s.k});
    reg(name, [s, backend, inline_small, reproducible](benchmark::State& state) {
      Context ctx(backend);
      ctx.blas.set_inline_small(inline_small);
      ctx.blas.set_reproducible(reproducible);
      // Row-major storage of op(A) (m, k) and op(B) (k, n).
      const int ar = s.ta == Op::N ? s.m : s.k, ac = s.ta == Op::N ? s.k : s.m;
      const int br = s.tb == Op::N ? s.k : s.n, bc = s.tb == Op::N ? s.n : s.k;
      auto A = matrix(ctx, "A", ar, ac, 1), B = matrix(ctx, "B", br, bc, 2), C = matrix(ctx, "C", s.m, s.n, 3);
      const T beta = s.ta == Op::T ? T(1) : T(0);  // the weight gradient accumulates
      timed(state, ctx, [&] { ctx.blas.gemm<T>(s.ta, s.tb, T(1), A, B, beta, C); });
      set_flops(state, 2.0 * s.m * s.n * s.k);
    });
  }
}

// ------------------------------------------------------------------ layers
// A layer bound to its own parameter and gradient buffers, initialised.
struct Bound {
  VectorBuffer<T> params, grads;
  void bind(Layer<T>& layer) {
    const std::size_t n = std::max<std::size_t>(1, layer.num_params());
    params = VectorBuffer<T>("params", n);
    grads = VectorBuffer<T>("grads", n);
    auto host = Kokkos::create_mirror_view(params);
    layer.init(HostVector<T>(host.data(), n), Init::kaiming_uniform, 1, 0);
    Kokkos::deep_copy(params, host);
    layer.bind(params, grads);
  }
};

void register_linear(const Workload& w) {
  for (std::size_t i = 0; i + 1 < w.widths.size(); ++i) {
    const int b = static_cast<int>(w.batch), in = static_cast<int>(w.widths[i]), out = static_cast<int>(w.widths[i + 1]);
    const std::string where = w.name + "/L" + std::to_string(i + 1) + "/" + dims({b, in, out});
    const bool first = i == 0;  // the first layer computes no input gradient
    for (bool backward : {false, true}) {
      reg(std::string("linear/") + (backward ? "bwd/" : "fwd/") + where,
          [=](benchmark::State& state) {
            Context ctx;
            Linear<T> layer(in, out);
            Bound p;
            p.bind(layer);
            auto x = matrix(ctx, "x", b, in, 1), y = matrix(ctx, "y", b, out, 2);
            auto dy = matrix(ctx, "dy", b, out, 3), dx = matrix(ctx, "dx", b, in, 4);
            time_layer(state, ctx, layer, b, x, y, dy, first ? Matrix<T>() : Matrix<T>(dx), backward);
            set_flops(state, (backward ? (first ? 2.0 : 4.0) : 2.0) * b * in * out);
          });
    }
  }
}

// Elementwise layers on (batch, first hidden width). Bytes: forward reads x
// and writes y; backward reads dy and x (or y) and writes dx, except Dropout
// (reads dy, writes dx).
void register_elementwise(const Workload& w) {
  const int b = static_cast<int>(w.batch), h = static_cast<int>(w.widths[1]);
  struct Kind {
    std::string name;
    std::function<LayerPtr<T>()> make;
    double fwd_bytes, bwd_bytes;  // per element, in units of sizeof(T)
  };
  std::vector<Kind> kinds;
  for (auto a : {ActivationKind::relu, ActivationKind::gelu, ActivationKind::tanh, ActivationKind::sigmoid})
    kinds.push_back({to_string(a), [a] { return make_activation<T>(a); }, 2, 3});
  kinds.push_back({"dropout", [] { return LayerPtr<T>(new Dropout<T>(0.1, 1)); }, 2, 2});
  kinds.push_back({"layernorm", [h] { return LayerPtr<T>(new LayerNorm<T>(h)); }, 2, 3});
  for (const Kind& k : kinds)
    for (bool backward : {false, true})
      reg(k.name + (backward ? "/bwd/" : "/fwd/") + w.name + "/" + dims({b, h}),
          [=](benchmark::State& state) {
            Context ctx;
            auto layer = k.make();
            layer->reserve(b, h);
            Bound p;
            p.bind(*layer);
            auto x = matrix(ctx, "x", b, h, 1), y = matrix(ctx, "y", b, h, 2);
            auto dy = matrix(ctx, "dy", b, h, 3), dx = matrix(ctx, "dx", b, h, 4);
            time_layer(state, ctx, *layer, b, x, y, dy, dx, backward);
            set_bytes(state, (backward ? k.bwd_bytes : k.fwd_bytes) * b * h * sizeof(T));
          });
}

// Losses on (batch, output width): read the output (and targets), write the
// gradient.
void register_losses(const Workload& w) {
  const int b = static_cast<int>(w.batch), c = static_cast<int>(w.widths.back());
  for (LossKind kind : {LossKind::cross_entropy, LossKind::mse}) {
    const std::string name = kind == LossKind::cross_entropy ? "ce" : "mse";
    reg("loss/" + name + "/" + w.name + "/" + dims({b, c}), [=](benchmark::State& state) {
      Context ctx;
      auto loss = make_loss<T>(kind);
      auto out = matrix(ctx, "out", b, c, 1), dout = matrix(ctx, "dout", b, c, 2);
      auto values = matrix(ctx, "targets", b, c, 3);
      LabelsBuffer labels("labels", b);
      Kokkos::parallel_for("strata::bench::labels", Range(ctx.exec, 0, b),
                           KOKKOS_LAMBDA(const int i) { labels(i) = (i * 7) % c; });
      Targets<T> t;
      if (kind == LossKind::cross_entropy) t.labels = labels;
      else t.values = values;
      timed(state, ctx, [&] { benchmark::DoNotOptimize(loss->forward_backward(ctx, out, t, dout, T(1) / b)); });
      const double bytes = kind == LossKind::cross_entropy ? 2.0 * b * c * sizeof(T) + b * sizeof(std::int32_t)
                                                          : 3.0 * b * c * sizeof(T);
      set_bytes(state, bytes);
    });
  }
}

// One optimizer step over the workload's flat buffers. Bytes per parameter:
// SGD reads p, g and writes p (3); with momentum also reads and writes the
// buffer (5); Adam and AdamW read p, g, m, v and write p, m, v (7).
void register_optimizers(const Workload& w) {
  const std::size_t n = num_params(w);
  struct Kind {
    std::string name;
    OptimizerConfig config;
    double words;
  };
  OptimizerConfig sgd, momentum, adam, adamw;
  momentum.momentum = 0.9;
  adam.kind = OptimizerKind::adam;
  adam.lr = 1e-3;
  adamw.kind = OptimizerKind::adamw;
  adamw.lr = 1e-3;
  adamw.weight_decay = 0.01;
  for (const Kind& k : {Kind{"sgd", sgd, 3}, Kind{"sgd-momentum", momentum, 5}, Kind{"adam", adam, 7},
                        Kind{"adamw", adamw, 7}})
    reg("opt/" + k.name + "/" + w.name + "/" + std::to_string(n), [=](benchmark::State& state) {
      Context ctx;
      Optimizer<T> opt(k.config, n);
      VectorBuffer<T> p("p", n), g("g", n);
      fill(ctx, p.data(), n, 1);
      fill(ctx, g.data(), n, 2);
      timed(state, ctx, [&] { opt.step(ctx, p, g); });
      set_bytes(state, k.words * n * sizeof(T));
    });
}

// ------------------------------------------------------------------ batchnorm
// BatchNorm2d in training (batch statistics) at the shapes of W4's two
// (the CNN of docs/benchmarks.md: 32 channels of 28 x 28, 64 of 14 x 14),
// alone and with the ReLU after it fused into its kernels ("batchnorm+relu",
// as models run it: layers/capabilities.hpp FusedActivation). Bytes: forward
// reads x and writes y; backward reads dy and x and writes dx.
void register_batchnorm() {
  const int b = 128;
  struct Case {
    int c, hw;
  };
  // A struct, not a structured binding: lambdas capture bindings only from
  // C++20 on (clang/hipcc and nvcc refuse them in C++17).
  for (const Case k : {Case{32, 28}, Case{64, 14}})
    for (bool relu : {false, true})
    for (bool backward : {false, true}) {
      const int c = k.c, hw = k.hw;
      reg(std::string(relu ? "batchnorm+relu/" : "batchnorm/") + (backward ? "bwd" : "fwd") + "/W4/" +
              dims({b, c, hw, hw}),
          [=](benchmark::State& state) {
            Context ctx;
            BatchNorm<T> layer(c);
            if (relu) layer.fuse(ActivationKind::relu);
            const int n = c * hw * hw;
            layer.set_input_shape(Shape{std::size_t(c), std::size_t(hw), std::size_t(hw)});
            layer.reserve(b, n);
            Bound p;
            p.bind(layer);
            auto x = matrix(ctx, "x", b, n, 1), y = matrix(ctx, "y", b, n, 2);
            auto dy = matrix(ctx, "dy", b, n, 3), dx = matrix(ctx, "dx", b, n, 4);
            time_layer(state, ctx, layer, b, x, y, dy, dx, backward);
            set_bytes(state, (backward ? 3.0 : 2.0) * b * n * sizeof(T));
          });
    }
}

// ------------------------------------------------------------------ conv2d
// W4's two convolutions (3x3, padding 1, no bias; conv1 1 -> 32 channels on
// 28 x 28, conv2 32 -> 64 on 14 x 14), by each host algorithm of Conv2d.
void register_conv2d() {
  const int b = 128;
  struct Case {
    int c, hw, o;
  };
  Window2d win;
  win.kh = win.kw = 3;
  win.ph = win.pw = 1;
  for (const Case k : {Case{1, 28, 32}, Case{32, 14, 64}})
    for (const auto algo : {ConvAlgorithm::samples, ConvAlgorithm::chunks})
      for (const char* part : {"fwd", "bwd", "wts"}) {
        const std::string a = algo == ConvAlgorithm::samples ? "samples" : "chunks";
        reg("conv2d/" + a + "/" + part + "/W4/" + dims({b, k.c, k.hw, k.hw, k.o}),
            [=](benchmark::State& state) {
              Context ctx;
              Conv2d<T> layer(k.c, k.o, win, 1, false);
              layer.set_algorithm(algo);
              const int in = k.c * k.hw * k.hw, out = k.o * k.hw * k.hw;
              layer.set_input_shape(Shape{std::size_t(k.c), std::size_t(k.hw), std::size_t(k.hw)});
              layer.reserve(b, in);
              Bound p;
              p.bind(layer);
              auto x = matrix(ctx, "x", b, in, 1), y = matrix(ctx, "y", b, out, 2);
              auto dy = matrix(ctx, "dy", b, out, 3), dx = matrix(ctx, "dx", b, in, 4);
              const bool wts = part[0] == 'w';
              time_layer(state, ctx, layer, b, x, y, dy, wts ? Matrix<T>() : Matrix<T>(dx), part[0] != 'f');
              state.counters["samples"] = layer.runs_samples(ctx, b) ? 1 : 0;
              const double gemm = 2.0 * b * k.hw * k.hw * k.o * k.c * 9;
              set_flops(state, part[0] == 'b' ? 2 * gemm : gemm);
            });
      }
}

// ------------------------------------------------------------------ attention
// CausalAttention at W5's (gpt-mini's) shape: batch 32, 128 positions, 8 heads
// of 32. FLOP/s count the products of the causal tiles' GEMMs (the
// breakdown's reference in strata-bench-train): 2 GEMMs forward, 4 backward.
void register_attention() {
  const int b = 32, t = 128, heads = 8, hs = 32, w = heads * hs;
  double tile_products = 0;  // per (sample, head), one GEMM of each kind
  attn::for_causal_tiles(t, [&](const int r0, const int r1) { tile_products += double(r1 - r0) * r1 * hs; });
  for (bool backward : {false, true})
    reg(std::string("attention/") + (backward ? "bwd" : "fwd") + "/W5/" + dims({b, t, heads, hs}),
        [=](benchmark::State& state) {
          Context ctx;
          CausalAttention<T> layer(heads, hs);
          layer.set_input_shape(Shape{std::size_t(t), std::size_t(3 * w)});
          layer.reserve(b, std::size_t(t) * 3 * w);
          auto x = matrix(ctx, "x", b, t * 3 * w, 1), y = matrix(ctx, "y", b, t * w, 2);
          auto dy = matrix(ctx, "dy", b, t * w, 3), dx = matrix(ctx, "dx", b, t * 3 * w, 4);
          time_layer(state, ctx, layer, b, x, y, dy, dx, backward);
          state.counters["tiles"] = layer.runs_tiles(ctx) ? 1 : 0;
          set_flops(state, (backward ? 8.0 : 4.0) * tile_products * b * heads);
        });
}

// ------------------------------------------------------------------ launches
// One elementwise update y += a x over n floats, launched as a Kokkos kernel
// on all of the context's threads ("kernel") or run inline on the calling
// thread ("inline"): where the two cross is where backends/launch.hpp's
// inline_work_limit belongs.
void register_launches() {
  for (std::size_t n : {std::size_t(32), std::size_t(1024), std::size_t(4096), std::size_t(16384),
                        std::size_t(65536), std::size_t(262144)})
    for (bool inl : {false, true})
      reg(std::string("launch/") + (inl ? "inline" : "kernel") + "/" + std::to_string(n),
          [n, inl](benchmark::State& state) {
            Context ctx;
            ctx.inline_ok = inl;
            if (inl) ctx.threads = 1;  // inline whatever the size
            VectorBuffer<T> x("x", n), y("y", n);
            fill(ctx, x.data(), n, 1);
            fill(ctx, y.data(), n, 2);
            T* xp = x.data();
            T* yp = y.data();
            timed(state, ctx, [&] {
              for_range(ctx, "strata::bench::axpy", n,
                        KOKKOS_LAMBDA(const std::size_t i) { yp[i] += T(1e-3) * xp[i]; });
            });
            state.counters["threads"] = inl ? 1 : kernel_threads(ctx.exec);
            set_bytes(state, 3.0 * n * sizeof(T));
          });
}

void register_all() {
  register_launches();
  register_attention();
  register_batchnorm();
  register_conv2d();
  for (const Workload& w : workloads()) {
    if (w.widths.empty()) continue;  // the MLPs of docs/benchmarks.md (W1-W3) only
    if (Blas::vendor_available()) register_gemm(w, GemmBackend::vendor);
    register_gemm(w, GemmBackend::portable);
    register_gemm(w, GemmBackend::portable, true);
    register_gemm(w, GemmBackend::portable, false, true);
    register_linear(w);
    register_elementwise(w);
    register_losses(w);
    register_optimizers(w);
  }
}

void print_help() {
  std::printf(
      "Usage: strata-bench-micro [Google Benchmark options] [Kokkos options]\n\n"
      "Micro-benchmarks of Strata's GEMM backends, layers, losses and optimizers at the\n"
      "shapes of the workloads W1, W2, W3 (benchmarks are named\n"
      "<kind>/.../<workload>/<shape>; FLOP/s or bytes_per_second as counters).\n\n"
      "Common options:\n"
      "  --benchmark_filter=REGEX        e.g. '/W2/', '^gemm/', '^opt/adam/'\n"
      "  --benchmark_list_tests          list the names and exit\n"
      "  --benchmark_min_time=SECONDS    minimum time per benchmark (default 0.5)\n"
      "  --benchmark_repetitions=N       repeat and report mean/median/stddev\n"
      "  --benchmark_report_aggregates_only=true\n"
      "  --benchmark_format=console|json|csv, --benchmark_out=FILE --benchmark_out_format=json\n"
      "  --kokkos-threads=N (Kokkos 3.x) / --kokkos-num-threads=N   host threads\n"
      "All Google Benchmark options: see its documentation (--benchmark_*).\n\n"
      "Exit codes: 0 done, 2 bad options, 4 runtime failure.\n");
}

}  // namespace
}  // namespace strata::bench

int main(int argc, char** argv) {
  using namespace strata;
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      bench::print_help();
      return app::exit_ok;
    }
  std::unique_ptr<Runtime> runtime;
  return app::guarded("strata-bench-micro", [&] {
    runtime = std::make_unique<Runtime>(argc, argv);  // consumes --kokkos-* options
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return app::exit_config;
    benchmark::AddCustomContext("strata", bench::configuration());
    bench::register_all();
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return app::exit_ok;
  });
}
