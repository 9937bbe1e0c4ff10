#include "benchmarks/training/layer_breakdown.hpp"

#include "backends/launch.hpp"
#include "benchmarks/common/bench_utils.hpp"
#include "layers/attention.hpp"
#include "layers/block.hpp"
#include "layers/conv2d.hpp"
#include "layers/embedding.hpp"
#include "layers/loss.hpp"
#include "layers/linear.hpp"
#include "planner/layer_probe.hpp"

#include <algorithm>
#include <functional>

namespace strata::bench {
namespace {

bool is_gemm_layer(const Layer<float>& l) {
  return dynamic_cast<const Linear<float>*>(&l) != nullptr ||
         dynamic_cast<const Conv2d<float>*>(&l) != nullptr ||
         dynamic_cast<const CausalAttention<float>*>(&l) != nullptr;
}

// The three GEMMs of layer `l` (forward, weight gradient, input gradient)
// for `batch` samples, one per group.
std::vector<GemmShape> layer_gemms(const Layer<float>& l, std::size_t batch, const std::string& name) {
  const int b = static_cast<int>(batch);
  if (const auto* blk = dynamic_cast<const Block<float>*>(&l)) {
    std::vector<GemmShape> all;
    auto& block = const_cast<Block<float>&>(*blk);
    for (std::size_t j = 0; j < block.num_layers(); ++j)
      for (const auto& g : layer_gemms(block.layer(j), batch, name + "." + std::to_string(j)))
        all.push_back(g);
    return all;
  }
  if (const auto* att = dynamic_cast<const CausalAttention<float>*>(&l)) {
    const int t = static_cast<int>(att->input_shape()[0]), hs = static_cast<int>(att->head_size());
    const int n = b * static_cast<int>(att->heads());
    // The GEMMs of the causal tiles (layers/attention.cpp).
    std::vector<GemmShape> g;
    attn::for_causal_tiles(t, [&](const int r0, const int r1) {
      const int m = r1 - r0;
      g.push_back({Op::N, Op::T, m, r1, hs, name + " forward", n});       // scores
      g.push_back({Op::N, Op::N, m, hs, r1, name + " forward", n});       // P V
      g.push_back({Op::T, Op::N, m, hs, t - r0, name + " input gradient", n});  // dV
      g.push_back({Op::N, Op::T, m, r1, hs, name + " input gradient", n});      // dP
      g.push_back({Op::N, Op::N, m, hs, r1, name + " input gradient", n});      // dQ
      g.push_back({Op::T, Op::N, m, hs, t - r0, name + " input gradient", n});  // dK
    });
    return g;
  }
  if (const auto* lin = dynamic_cast<const Linear<float>*>(&l)) {
    const int in = static_cast<int>(lin->in()), out = static_cast<int>(lin->out());
    // Rows: samples times positions (a Linear on {T, in} is a GEMM over B T rows).
    const Shape& shape = l.input_shape();
    const int b = static_cast<int>(batch * (shape.rank() ? shape.numel() / lin->in() : 1));
    return {{Op::N, Op::T, b, out, in, name + " forward"},
            {Op::T, Op::N, out, in, b, name + " weight gradient"},
            {Op::N, Op::N, b, in, out, name + " input gradient"}};
  }
  if (const auto* conv = dynamic_cast<const Conv2d<float>*>(&l)) {
    const int og = static_cast<int>(conv->out_channels() / conv->groups());
    const int kg = static_cast<int>(conv->patch()), n = b * static_cast<int>(conv->positions());
    std::vector<GemmShape> g;
    for (std::size_t i = 0; i < conv->groups(); ++i) {
      g.push_back({Op::N, Op::N, og, n, kg, name + " forward"});
      g.push_back({Op::N, Op::T, og, kg, n, name + " weight gradient"});
      g.push_back({Op::T, Op::N, kg, n, og, name + " input gradient"});
    }
    return g;
  }
  return {};
}

// Median seconds of `op` (fenced), each repetition repeating it for >= 20 ms.
double time_op(Context& ctx, int reps, const std::function<void()>& op) {
  op();
  ctx.exec.fence();
  auto t0 = Clock::now();
  op();
  ctx.exec.fence();
  const double once = std::max(1e-9, seconds(t0, Clock::now()));
  const int iters = static_cast<int>(std::clamp(0.02 / once, 1.0, 100000.0));
  std::vector<double> s;
  for (int r = 0; r < reps; ++r) {
    t0 = Clock::now();
    for (int i = 0; i < iters; ++i) op();
    ctx.exec.fence();
    s.push_back(seconds(t0, Clock::now()) / iters);
  }
  return stats(s).median;
}

}  // namespace

std::vector<GemmShape> step_gemms(const Sequential<float>& model, std::size_t batch) {
  std::vector<GemmShape> out;
  for (std::size_t i = 0; i < model.num_layers(); ++i)
    for (const auto& s : layer_gemms(model.layer(i), batch, model.layer_name(i)))
      if (i > 0 || s.what.find("input gradient") == std::string::npos) out.push_back(s);
  return out;
}

double gemm_rate(const std::vector<GemmShape>& shapes, Context& ctx, int reps) {
  struct Operands {
    MatrixBuffer<float> a, b, c;
  };
  std::vector<Operands> ops;
  double flops = 0;
  for (const auto& s : shapes) {
    const std::size_t ar = s.ta == Op::N ? s.m : s.k, ac = s.ta == Op::N ? s.k : s.m;
    const std::size_t br = s.tb == Op::N ? s.k : s.n, bc = s.tb == Op::N ? s.n : s.k;
    Operands o{MatrixBuffer<float>("a", ar, ac), MatrixBuffer<float>("b", br, bc),
               MatrixBuffer<float>("c", s.m, s.n)};
    planner::fill_seeded(o.a.data(), o.a.size(), 1);
    planner::fill_seeded(o.b.data(), o.b.size(), 2);
    ops.push_back(o);
    flops += s.flops();
  }
  Blas blas(ctx.blas.backend(), ctx.exec);
  blas.set_inline_small(false);
  blas.set_reproducible(ctx.blas.reproducible());
  // Shapes run `count` times: one per host thread at a time on the sequential
  // BLAS where the layer does so too (each thread its own output), else in turn.
  const bool per_thread = blas.sequential_in_kernels();
  std::vector<MatrixBuffer<float>> outs;
  if (per_thread)
    for (std::size_t i = 0; i < shapes.size(); ++i)
      if (shapes[i].count > 1)
        outs.emplace_back("c", static_cast<std::size_t>(shapes[i].count) * shapes[i].m, shapes[i].n);
  const double t = time_op(ctx, reps, [&] {
    for (std::size_t i = 0, o = 0; i < shapes.size(); ++i) {
      const auto& s = shapes[i];
      if (s.count > 1 && per_thread) {
        const float* a = ops[i].a.data();
        const float* bm = ops[i].b.data();
        float* c = outs[o++].data();
        const int lda = static_cast<int>(ops[i].a.extent(1)), ldb = static_cast<int>(ops[i].b.extent(1));
        for_host_items(ctx, "strata::bench::gemm_rate", static_cast<std::size_t>(s.count),
                       [=, &blas](std::size_t item) {
                         blas.gemm<float>(s.ta, s.tb, s.m, s.n, s.k, 1.0f, a, lda, bm, ldb, 0.0f,
                                          c + item * s.m * s.n, s.n);
                       },
                       static_cast<std::size_t>(s.m) * s.n * s.k);
        continue;
      }
      for (int r = 0; r < s.count; ++r)
        blas.gemm<float>(s.ta, s.tb, 1.0f, ops[i].a, ops[i].b, 0.0f, ops[i].c);
    }
  });
  return flops / t / 1e9;
}

namespace {

// One row of the table: layer `l` alone on a batch of seeded values (token
// ids for an Embedding), forward, backward-data and backward-weights.
// Returns forward + backward seconds.
double layer_row(Layer<float>& l, const std::string& label, std::size_t batch, Context& ctx,
                 int reps, const std::string& workload, unsigned salt,
                 std::vector<GemmPart>* parts) {
  planner::LayerProbe probe(l, batch, salt);
  auto &x = probe.x, &y = probe.y, &dy = probe.dy, &dx = probe.dx;
  Saved<float>& s = probe.saved;
  const double fwd = time_op(ctx, reps, [&] { l.forward(ctx, x, y, s); });
  // Backward with and without the input gradient (the weight part alone).
  const double bwd = time_op(ctx, reps, [&] { l.backward(ctx, dy, dx, s); });
  // (Layers without parameters have no weight part; not every one takes a
  // missing input gradient, which only the first layer gets.)
  // (A tied head has no parameters of its own but a weight gradient.)
  const bool weights = l.num_params() > 0 || !tied_to(l).empty();
  const double wts =
      weights ? time_op(ctx, reps, [&] { l.backward(ctx, dy, Matrix<float>(), s); }) : 0.0;
  const double data = std::max(0.0, bwd - wts);
  char cols[3][32] = {"-", "-", "-"};
  if (is_gemm_layer(l)) {
    const auto g = layer_gemms(l, batch, label);
    const double t[3] = {fwd, data, wts};
    const char* part[3] = {"forward", "input gradient", "weight gradient"};
    for (int k = 0; k < 3; ++k) {
      std::vector<GemmShape> mine;
      for (const auto& sh : g)
        if (sh.what.find(part[k]) != std::string::npos) mine.push_back(sh);
      double flops = 0;
      for (const auto& sh : mine) flops += sh.flops();
      // The input gradient is a difference of two timings: below 2% of the
      // backward it is noise, not a rate.
      if (mine.empty() || t[k] <= 0.02 * bwd) continue;
      const double rate = flops / t[k] / 1e9, ref = gemm_rate(mine, ctx, reps);
      std::snprintf(cols[k], sizeof cols[k], "%.1f (%.0f%%)", rate, 100 * rate / ref);
      if (parts)
        parts->push_back({label, l.name(), k == 0 ? "forward" : k == 1 ? "bwd-data" : "bwd-wts",
                          t[k], rate / ref, flops, label.rfind(" (", 0) == 0});
    }
  }
  std::printf("%-4s %-10s %-34s %9.3f %9.3f %9.3f %18s %18s %18s\n", workload.c_str(),
              label.c_str(), l.name().substr(0, 34).c_str(), 1e3 * fwd, 1e3 * data, 1e3 * wts,
              cols[0], cols[1], cols[2]);
  std::fflush(stdout);
  return fwd + bwd;
}

}  // namespace

void layer_breakdown(Sequential<float>& model, std::size_t batch, Context& ctx, int reps,
                     const std::string& workload, std::vector<GemmPart>* parts) {
  std::printf("# %s per layer, batch %zu, %d thread(s): ms per step, median of %d; GEMM layers: "
              "GFLOP/s and %% of the same GEMM shape alone (measured just before); the inner "
              "layers of the first block indented (not in the total)\n",
              workload.c_str(), batch, ctx.threads, reps);
  std::printf("%-4s %-10s %-34s %9s %9s %9s %18s %18s %18s\n", "", "layer", "type", "forward",
              "bwd-data", "bwd-wts", "fwd GF/s (%)", "bwd-data GF/s (%)", "bwd-wts GF/s (%)");
  model.set_training(true);
  double total = 0;
  bool first_block = true;
  for (std::size_t i = 0; i < model.num_layers(); ++i) {
    Layer<float>& l = model.layer(i);
    const unsigned salt = static_cast<unsigned>(i);
    if (model.fused(i)) {  // the layer before applies it: timed in its row
      std::printf("%-4s %-10s %-34s %9s %9s %9s\n", workload.c_str(), model.layer_name(i).c_str(),
                  (l.name() + " (fused: in the row above)").substr(0, 34).c_str(), "-", "-", "-");
      continue;
    }
    total += layer_row(l, model.layer_name(i), batch, ctx, reps, workload, salt, parts);
    // A convolution that runs as per-thread samples also shows the chunks
    // algorithm, timed right after (Conv2d's two host algorithms).
    if (auto* conv = dynamic_cast<Conv2d<float>*>(&l); conv != nullptr && conv->runs_samples(ctx, batch)) {
      conv->set_algorithm(ConvAlgorithm::chunks);
      conv->reserve(batch, model.width(i));
      layer_row(*conv, " (chunks)", batch, ctx, reps, workload, salt, parts);
      conv->set_algorithm(ConvAlgorithm::automatic);
    }
    // The inside of the first block, each inner layer alone (blocks in blocks too).
    if (auto* blk = dynamic_cast<Block<float>*>(&l); blk != nullptr && first_block) {
      first_block = false;
      std::function<void(Block<float>&, const std::string&)> inside = [&](Block<float>& b,
                                                                          const std::string& at) {
        for (std::size_t j = 0; j < b.num_layers(); ++j) {
          const std::string label = at + "." + std::to_string(j);
          if (auto* inner = dynamic_cast<Block<float>*>(&b.layer(j))) {
            layer_row(*inner, " " + label, batch, ctx, reps, workload, salt + 7 * static_cast<unsigned>(j), parts);
            inside(*inner, label);
          } else {
            layer_row(b.layer(j), " " + label, batch, ctx, reps, workload, salt + 7 * static_cast<unsigned>(j), parts);
          }
        }
      };
      inside(*blk, model.layer_name(i));
    }
  }
  // The loss on the model's output: softmax cross-entropy over seeded labels,
  // one per position for a language model (an Embedding first).
  {
    const std::size_t out = model.width(model.num_layers());
    const std::size_t positions =
        dynamic_cast<const Embedding<float>*>(&model.layer(0)) != nullptr ? model.shape(0)[0] : 1;
    const std::size_t classes = out / positions;
    MatrixBuffer<float> z("z", batch, out), dz("dz", batch, out);
    planner::fill_seeded(z.data(), z.size(), 11);
    LabelsBuffer labels("labels", batch * positions);
    auto host = Kokkos::create_mirror_view(labels);
    for (std::size_t k = 0; k < host.size(); ++k) host(k) = static_cast<std::int32_t>((k * 40503u) % classes);
    Kokkos::deep_copy(labels, host);
    SoftmaxCrossEntropy<float> ce;
    Targets<float> t;
    t.labels = labels;
    const double fwd_bwd = time_op(ctx, reps, [&] { ce.forward_backward(ctx, z, t, dz, 1.0f / batch); });
    total += fwd_bwd;
    std::printf("%-4s %-10s %-34s %9.3f %9s %9s %18s %18s %18s\n", workload.c_str(), "loss",
                (std::string("softmax cross-entropy x ") + std::to_string(positions)).substr(0, 34).c_str(),
                1e3 * fwd_bwd, "-", "-", "-", "-", "-");
  }
  std::printf("%-4s %-10s %-34s %9.3f ms forward + backward of all layers and the loss\n",
              workload.c_str(), "total", "", 1e3 * total);
}

}  // namespace strata::bench
