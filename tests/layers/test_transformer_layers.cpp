// The transformer layers (token and position embeddings, causal
// self-attention) against naive host references written from PyTorch's
// definitions (forward) and against central finite differences in double
// precision (input and parameter gradients), for odd sequence lengths and
// head counts; both ways attention computes (per (sample, head) on the
// sequential BLAS, and the portable kernels) against each other and any
// thread count; bad shapes and ids as clear errors.
#include "backends/error.hpp"
#include "backends/launch.hpp"
#include "layers/attention.hpp"
#include "strategies/reproducible.hpp"
#include "layers/decoder.hpp"
#include "layers/embedding.hpp"
#include "layers/position_embedding.hpp"
#include "layers/registry.hpp"
#include "layer_harness.hpp"
#include "test_utils.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace strata {
namespace {

using test::Bound;
using test::Vec;
using test::check_gradients;
using test::expect_near;

// ------------------------------------------------------------------ Embedding

TEST(Embedding, ForwardGathersRowsAndBackwardAddsIntoTheRowsUsed) {
  const std::size_t vocab = 7, dim = 37, batch = 3, t = 5;  // dim: two column blocks and a rest
  Bound b(std::make_unique<Embedding<double>>(vocab, dim), batch, Shape{t}, 1);
  // Ids 0, 2, 3 and 6 only; 3 repeats within and across samples.
  const Vec ids{3, 0, 3, 6, 2, 2, 3, 3, 0, 6, 3, 6, 0, 0, 2};
  const Vec w = b.param_values();
  const Vec y = b.forward(ids);
  ASSERT_EQ(y.size(), batch * t * dim);
  for (std::size_t p = 0; p < ids.size(); ++p)
    for (std::size_t c = 0; c < dim; ++c)
      ASSERT_EQ(y[p * dim + c], w[static_cast<std::size_t>(ids[p]) * dim + c]) << p << ", " << c;
  const Vec dy = test::randn<double>(batch * t * dim, 2);
  b.backward(ids, dy);
  const Vec dw = test::to_host(b.grads);
  Vec want(vocab * dim, 0.0);  // positions in order, as the layer adds them
  for (std::size_t p = 0; p < ids.size(); ++p)
    for (std::size_t c = 0; c < dim; ++c) want[static_cast<std::size_t>(ids[p]) * dim + c] += dy[p * dim + c];
  EXPECT_EQ(dw, want);
  for (std::size_t c = 0; c < dim; ++c) {  // rows 1, 4, 5 unused: exactly zero
    EXPECT_EQ(dw[1 * dim + c], 0.0);
    EXPECT_EQ(dw[4 * dim + c], 0.0);
    EXPECT_EQ(dw[5 * dim + c], 0.0);
  }
  // The same bits on one thread (every kernel inline).
  b.ctx.threads = 1;
  b.backward(ids, dy);
  EXPECT_EQ(test::to_host(b.grads), dw);
}

TEST(Embedding, IdsOutsideTheVocabularyAreADataError) {
  Bound b(std::make_unique<Embedding<double>>(5, 4), 2, Shape{3}, 1);
  for (const Vec& ids : {Vec{0, 1, 5, 2, 3, 4}, Vec{0, -1, 2, 2, 3, 4}, Vec{0, 1.5, 2, 2, 3, 4}}) {
    try {
      b.forward(ids);
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::data);
      EXPECT_NE(e.message().find("Embedding(5, 4): 1 of the batch's 6 token ids are not whole "
                                 "numbers in [0, 5)"),
                std::string::npos)
          << e.message();
    }
  }
}

// ---------------------------------------------------------- PositionEmbedding

TEST(PositionEmbedding, AddsTheRowOfEachPositionAndMatchesFiniteDifferences) {
  const std::size_t context = 9, dim = 6, batch = 3, t = 7;
  Bound b(std::make_unique<PositionEmbedding<double>>(context, dim), batch, Shape{t, dim}, 3);
  const Vec x = test::randn<double>(batch * t * dim, 4);
  const Vec w = b.param_values();
  const Vec y = b.forward(x);
  for (std::size_t s = 0; s < batch; ++s)
    for (std::size_t p = 0; p < t; ++p)
      for (std::size_t c = 0; c < dim; ++c) {
        const std::size_t k = (s * t + p) * dim + c;
        ASSERT_EQ(y[k], x[k] + w[p * dim + c]);
      }
  check_gradients(b, x, 5);
  // Rows of positions the sequence does not reach get no gradient.
  const Vec dw = test::to_host(b.grads);
  for (std::size_t k = t * dim; k < context * dim; ++k) EXPECT_EQ(dw[k], 0.0) << k;
}

// ----------------------------------------------------------- CausalAttention

// softmax(q k^T / sqrt(hs), causal) v per sample and head, from the
// definition (PyTorch's scaled_dot_product_attention with is_causal=True).
Vec attention_reference(const Vec& x, std::size_t batch, std::size_t t, std::size_t heads,
                        std::size_t hs) {
  const std::size_t w = heads * hs;
  Vec y(batch * t * w, 0.0);
  for (std::size_t b = 0; b < batch; ++b)
    for (std::size_t h = 0; h < heads; ++h)
      for (std::size_t i = 0; i < t; ++i) {
        auto at = [&](std::size_t pos, std::size_t part, std::size_t e) {
          return x[(b * t + pos) * 3 * w + part * w + h * hs + e];
        };
        std::vector<double> s(i + 1);
        double mx = -1e300, sum = 0;
        for (std::size_t j = 0; j <= i; ++j) {
          double d = 0;
          for (std::size_t e = 0; e < hs; ++e) d += at(i, 0, e) * at(j, 1, e);
          s[j] = d / std::sqrt(static_cast<double>(hs));
          mx = std::max(mx, s[j]);
        }
        for (std::size_t j = 0; j <= i; ++j) sum += std::exp(s[j] - mx);
        for (std::size_t e = 0; e < hs; ++e) {
          double acc = 0;
          for (std::size_t j = 0; j <= i; ++j) acc += std::exp(s[j] - mx) / sum * at(j, 2, e);
          y[(b * t + i) * w + h * hs + e] = acc;
        }
      }
  return y;
}

struct AttnCase {
  std::size_t batch, t, heads, hs;
};

std::vector<AttnCase> attention_cases() {
  // The last two: 70 positions, three causal tiles (32,
  // 32, 6); 17 x 2 (sample, head) items share 32 blocks, so a block's dS
  // workspace holds the previous item's values beyond the tiles' ends.
  return {{2, 5, 3, 4}, {3, 7, 1, 5}, {1, 1, 2, 3}, {2, 8, 2, 8}, {4, 13, 3, 2}, {1, 70, 2, 3},
          {17, 70, 2, 3}};
}

LayerPtr<double> make_core(const AttnCase& k, bool portable) {
  auto core = std::make_unique<CausalAttention<double>>(k.heads, k.hs);
  core->set_portable(portable);
  return core;
}

TEST(CausalAttention, ForwardMatchesTheDirectReferenceOnBothPaths) {
  for (const AttnCase& k : attention_cases())
    for (bool portable : {true, false}) {
      Bound b(make_core(k, portable), k.batch, Shape{k.t, 3 * k.heads * k.hs}, 7);
      const Vec x = test::randn<double>(b.batch * b.in, 8);
      // Softmax-weighted sums of O(1) values in double, in another order than
      // the reference: rounding near 1e-15.
      expect_near(b.forward(x), attention_reference(x, k.batch, k.t, k.heads, k.hs), 1e-12,
                  b.layer->name() + (portable ? " portable" : " blas"));
    }
}

TEST(CausalAttention, GradientsMatchFiniteDifferences) {
  std::uint64_t seed = 20;
  for (const AttnCase& k : attention_cases())
    for (bool portable : {true, false}) {
      if (k.batch * k.t > 70) continue;  // keeps the differences quick
      Bound b(make_core(k, portable), k.batch, Shape{k.t, 3 * k.heads * k.hs}, ++seed);
      check_gradients(b, test::randn<double>(b.batch * b.in, seed + 1), seed);
    }
}

TEST(CausalAttention, BothPathsAndAnyThreadCountAgree) {
  if (!Blas::vendor_sequential_in_kernels())
    GTEST_SKIP() << "this build's BLAS (" << Blas::vendor_name()
                 << ") is not known to run sequentially inside kernels: only the portable path";
  for (const AttnCase& k : attention_cases()) {
    Bound blas(make_core(k, false), k.batch, Shape{k.t, 3 * k.heads * k.hs}, 30);
    Bound port(make_core(k, true), k.batch, Shape{k.t, 3 * k.heads * k.hs}, 30);
    ASSERT_TRUE(static_cast<CausalAttention<double>&>(*blas.layer).runs_tiles(blas.ctx));
    ASSERT_FALSE(static_cast<CausalAttention<double>&>(*port.layer).runs_tiles(port.ctx));
    const Vec x = test::randn<double>(blas.batch * blas.in, 31);
    const Vec dy = test::randn<double>(blas.batch * blas.out, 32);
    const Vec y = blas.forward(x), dx = blas.backward(x, dy);
    // Sums of at most T * hs products of O(1) values in another order.
    expect_near(y, port.forward(x), 1e-12, blas.layer->name() + " forward");
    expect_near(dx, port.backward(x, dy), 1e-12, blas.layer->name() + " dx");
    for (Bound* b : {&blas, &port}) {
      const Vec y1 = b->forward(x), dx1 = b->backward(x, dy);
      b->ctx.threads = 1;
      EXPECT_EQ(b->forward(x), y1) << b->layer->name();
      EXPECT_EQ(b->backward(x, dy), dx1) << b->layer->name();
    }
  }
}

// The tiles read P only up to each tile's end: with the saved
// scratch (P) full of NaN before the forward, forward and backward give the
// same bits as with it zeroed (a GEMM that read a NaN beyond the end would
// spread it).
TEST(CausalAttention, TilesReadNoSavedValueBeyondTheirEnd) {
  const AttnCase k{17, 70, 2, 3};
  Bound b(make_core(k, false), k.batch, Shape{k.t, 3 * k.heads * k.hs}, 40);
  if (!static_cast<CausalAttention<double>&>(*b.layer).runs_tiles(b.ctx))
    GTEST_SKIP() << "no sequential vendor BLAS in this build: no tiles";
  const Vec x = test::randn<double>(b.batch * b.in, 41), dy = test::randn<double>(b.batch * b.out, 42);
  const Vec y = b.forward(x), dx = b.backward(x, dy);
  auto xd = test::to_device(x, b.batch, b.in);
  MatrixBuffer<double> yn("y", b.batch, b.out), dxn("dx", b.batch, b.in);
  test::OneMicroBatch<double> m(*b.layer, xd, yn);
  Kokkos::deep_copy(m.memory, std::numeric_limits<double>::quiet_NaN());
  begin_pass(*b.layer);
  b.layer->forward(b.ctx, xd, yn, m.saved);
  b.layer->backward(b.ctx, test::to_device(dy, b.batch, b.out), dxn, m.saved);
  Kokkos::fence();
  EXPECT_EQ(test::to_host(yn), y);
  EXPECT_EQ(test::to_host(dxn), dx);
}

// Under --reproducible the tiles run the reproducible GEMM on each thread,
// and the portable kernels compute the same fused chains over the same
// ranges: the two give the same bits (what a GPU run, on the portable
// kernels, must reproduce of a host run), in float and double, and so on
// any thread count. Oracle: the portable kernels.
template <class T>
void expect_tiles_equal_portable_when_reproducible() {
  for (const AttnCase& k : attention_cases()) {
    auto tiled = std::make_unique<CausalAttention<T>>(k.heads, k.hs);
    auto portable = std::make_unique<CausalAttention<T>>(k.heads, k.hs);
    portable->set_portable(true);
    test::BoundT<T> a(std::move(tiled), k.batch, Shape{k.t, 3 * k.heads * k.hs}, 50);
    test::BoundT<T> b(std::move(portable), k.batch, Shape{k.t, 3 * k.heads * k.hs}, 50);
    for (auto* l : {&a, &b}) enable_reproducible(l->ctx);
    ASSERT_EQ(static_cast<CausalAttention<T>&>(*a.layer).runs_tiles(a.ctx), host_kernels);
    const auto x = test::randn<T>(a.batch * a.in, 51), dy = test::randn<T>(a.batch * a.out, 52);
    const auto y = a.forward(x), dx = a.backward(x, dy);
    EXPECT_EQ(y, b.forward(x)) << a.layer->name() << " batch " << k.batch << " forward";
    EXPECT_EQ(dx, b.backward(x, dy)) << a.layer->name() << " batch " << k.batch << " dx";
    a.ctx.threads = 1;
    EXPECT_EQ(a.forward(x), y) << a.layer->name() << " 1 thread";
    EXPECT_EQ(a.backward(x, dy), dx) << a.layer->name() << " 1 thread";
  }
}

TEST(CausalAttention, ReproducibleTilesAreBitwiseThePortableKernels) {
  expect_tiles_equal_portable_when_reproducible<float>();
  expect_tiles_equal_portable_when_reproducible<double>();
}

// The "attention" block of a model file: qkv, core and proj, named as nanoGPT's.
TEST(CausalAttention, ModelFileBlockHasNamedProjectionsAndMatchesFiniteDifferences) {
  const std::string text = R"(
input = [5, 6]
[[layers]]
name = "attn"
type = "attention"
heads = 3
)";
  auto model = build_model<double>(parse_model(text, "gpt.toml"), 1);
  std::vector<std::string> names;
  for (const auto& p : model.parameters()) names.push_back(p.name + p.shape.str());
  EXPECT_EQ(names, (std::vector<std::string>{"attn.qkv.weight{18, 6}", "attn.qkv.bias{18}",
                                             "attn.proj.weight{6, 6}", "attn.proj.bias{6}"}));
  LayerArgs args("gpt.toml:3", "attention");
  args.set("heads", std::int64_t(2));
  LayerBuild build;
  Bound b(make_attention<double>(args, Shape{5, 6}, build), 2, Shape{5, 6}, 40);
  check_gradients(b, test::randn<double>(b.batch * b.in, 41), 42);
}

// A head tied to the token embedding: no weight of its own, and the
// embedding's gradient is the sum of both uses (the oracle: the same model
// with an untied head holding a copy of the embedding).
TEST(TiedWeights, TheEmbeddingGradientIsTheSumOfBothUses) {
  const std::string body = R"(
input = [5]
[[layers]]
name = "wte"
type = "embedding"
vocab = 9
dim = 6
[[layers]]
name = "wpe"
type = "position_embedding"
context = 5
[[layers]]
type = "attention"
heads = 2
[[layers]]
name = "lm_head"
type = "linear"
out = 9
bias = false
)";
  auto tied = build_model<double>(parse_model(body + "tie = \"wte\"\n", "tied.toml"), 1);
  auto untied = build_model<double>(parse_model(body, "untied.toml"), 1);
  std::vector<std::string> names;
  for (const auto& p : tied.parameters()) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"wte.weight", "wpe.weight", "2.qkv.weight",
                                             "2.qkv.bias", "2.proj.weight", "2.proj.bias"}));
  EXPECT_EQ(untied.num_params(), tied.num_params() + 9 * 6);
  const std::size_t batch = 3;
  tied.build(batch);
  untied.build(batch);
  tied.init(Init::kaiming_uniform, 5);
  // The untied model: the same values, and the embedding again as the head.
  Vec p = test::to_host(tied.params());
  Vec q = p;
  q.insert(q.end(), p.begin(), p.begin() + 9 * 6);  // lm_head.weight last
  Kokkos::deep_copy(untied.params(), test::to_device(q));
  const Vec ids{1, 4, 4, 0, 8, 2, 2, 7, 1, 3, 5, 5, 6, 0, 8};
  const Vec dy = test::randn<double>(batch * 5 * 9, 6);
  Context ctx;
  auto run = [&](Sequential<double>& m) {
    m.zero_grad(ctx);
    const auto x = test::to_device(ids, batch, 5);
    Vec y = test::to_host(m.forward(ctx, x));
    Kokkos::deep_copy(m.output_grad(), test::to_device(dy, batch, 5 * 9));
    m.backward(ctx);
    Kokkos::fence();
    return std::make_pair(y, test::to_host(m.grads()));
  };
  const auto [yt, gt] = run(tied);
  const auto [yu, gu] = run(untied);
  EXPECT_EQ(yt, yu);
  ASSERT_EQ(gu.size(), gt.size() + 54);
  for (std::size_t i = 0; i < gt.size(); ++i) {
    // wte: the embedding's and the head's parts added in another order.
    const double want = i < 54 ? gu[i] + gu[gt.size() + i] : gu[i];
    ASSERT_NEAR(gt[i], want, 1e-12 * (1 + std::fabs(want))) << names.size() << " gradient " << i;
  }
  // A tie to a layer that does not exist, or of another shape, is a config error.
  EXPECT_THROW(build_model<double>(parse_model(body + "tie = \"wpe2\"\n", "t.toml"), 1), Error);
  try {
    build_model<double>(parse_model(body + "tie = \"wpe\"\n", "t.toml"), 1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("the weight of 'wpe' has shape {5, 6}, but this layer needs {9, 6}"),
              std::string::npos)
        << e.message();
  }
}

// Decoding one position at a time with the KV cache gives what a full
// forward of the sequence gives at each position (the oracle), for a GPT with
// two heads, residual blocks, LayerNorm, GELU, Dropout (evaluation) and a tied head.
TEST(Decoder, StepsMatchTheFullForwardAtEveryPosition) {
  const std::string text = R"(
input = [7]
[[layers]]
name = "wte"
type = "embedding"
vocab = 13
dim = 8
[[layers]]
name = "wpe"
type = "position_embedding"
context = 9
[[layers]]
name = "h"
type = "block"
repeat = 2
layers = [
  { type = "residual", layers = [ { type = "layernorm" }, { type = "attention", heads = 2, std = 0.3 },
                                  { type = "dropout", p = 0.5 } ] },
  { type = "residual", layers = [ { type = "layernorm" }, { type = "linear", out = 16, std = 0.3 },
                                  { type = "gelu" }, { type = "linear", out = 8, std = 0.3 } ] },
]
[[layers]]
name = "ln_f"
type = "layernorm"
[[layers]]
name = "lm_head"
type = "linear"
out = 13
bias = false
tie = "wte"
)";
  auto model = build_model<double>(parse_model(text, "gpt.toml"), 1);
  model.build(1);
  model.init(Init::kaiming_uniform, 3);
  model.set_training(false);
  const Vec ids{4, 12, 0, 7, 7, 3, 9};
  Context ctx;
  const Vec full = test::to_host(model.forward(ctx, test::to_device(ids, 1, 7)));
  Decoder<double> dec(model, 7);
  for (int round = 0; round < 2; ++round) {  // reset() forgets the first round
    dec.reset(ctx);
    for (std::size_t p = 0; p < ids.size(); ++p) {
      const Vec row = test::to_host(dec.step(ctx, static_cast<int>(ids[p])));
      ASSERT_EQ(row.size(), 13u);
      // Sums over at most 7 positions and 16 features in another order: double rounding.
      for (std::size_t j = 0; j < 13; ++j)
        ASSERT_NEAR(row[j], full[p * 13 + j], 1e-12 * (1 + std::fabs(full[p * 13 + j])))
            << "round " << round << " position " << p << " logit " << j;
    }
  }
  EXPECT_EQ(dec.position(), 7u);
  EXPECT_THROW(dec.step(ctx, 1), Error);  // the positions are used up
  EXPECT_THROW(Decoder<double>(model, 8), Error);  // longer than the model's T
}

std::string model_error(const std::string& text) {
  try {
    build_model<float>(parse_model(text, "gpt.toml"), 1);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config);
    return e.message();
  }
  return "";
}

void expect_error(const std::string& text, const std::vector<std::string>& parts) {
  const std::string m = model_error(text);
  for (const auto& p : parts) EXPECT_NE(m.find(p), std::string::npos) << "'" << p << "' not in: " << m;
}

TEST(TransformerModels, BadShapesAndOptionsAreClearErrors) {
  const std::string ids = "input = [8]\n[[layers]]\ntype = \"embedding\"\nvocab = 16\ndim = 12\n";
  // Heads that do not divide the width.
  expect_error(ids + "[[layers]]\ntype = \"attention\"\nheads = 5\n",
               {"gpt.toml:8", "key 'heads'", "5 heads do not divide the width 12"});
  // A sequence longer than the context.
  expect_error(ids + "[[layers]]\ntype = \"position_embedding\"\ncontext = 4\n",
               {"gpt.toml:6", "a sequence of 8 positions is longer than the context of 4"});
  // Embeddings take token ids, not vectors.
  expect_error("input = [8, 3]\n[[layers]]\ntype = \"embedding\"\nvocab = 16\ndim = 12\n",
               {"gpt.toml:2", "token ids of shape {T}", "{8, 3}"});
  expect_error(ids.substr(0, ids.find("dim")), {"gpt.toml:2", "needs the key 'dim'"});
  // Attention on a flat input.
  expect_error("input = [12]\n[[layers]]\ntype = \"attention\"\nheads = 2\n",
               {"gpt.toml:2", "{T, width}", "{12}"});
  EXPECT_EQ(model_error(ids + "[[layers]]\ntype = \"attention\"\nheads = 5\nhead_size = 4\n"), "");
}

}  // namespace
}  // namespace strata
