// The model representation: per-sample shapes, blocks (against naive
// references and finite differences), parameter names, model files (every
// error names file, line and key; --layers is the equivalent file) and
// checkpoints read by name.
#include "backends/error.hpp"
#include "backends/units.hpp"
#include "layers/block.hpp"
#include "layers/layernorm.hpp"
#include "layers/mlp.hpp"
#include "layers/registry.hpp"
#include "layer_harness.hpp"
#include "strategies/checkpoint_state.hpp"
#include "test_utils.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

namespace strata {
namespace {

namespace fs = std::filesystem;
using test::Bound;
using test::check_gradients;
using test::Vec;

// The message of the config error f throws ("" when it throws none).
template <class F>
std::string config_error(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config) << e.message();
    return e.message();
  }
  return "";
}

// A double model from the text of a model file (initialisation seed 1).
Sequential<double> model_from_text(const std::string& text, const std::string& name) {
  return build_model<double>(parse_model(text, name), 1);
}

void expect_contains(const std::string& text, std::initializer_list<const char*> parts) {
  for (const char* p : parts) EXPECT_NE(text.find(p), std::string::npos) << "'" << p << "' in: " << text;
}

// ------------------------------------------------------------------ units
// The one formatter of sizes and counts (backends/units.hpp), against the
// values written out.
TEST(Units, BytesCountsAndMib) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(64.0 * 1024 * 1024), "64.0 MiB");
  EXPECT_EQ(format_bytes(3.0 * 1024 * 1024 * 1024), "3.0 GiB");
  EXPECT_EQ(format_count(950), "950");
  EXPECT_EQ(format_count(2.51e6), "2.51M");
  EXPECT_EQ(format_mib(1.8 * 1024 * 1024), "1.80 MiB");
  EXPECT_EQ(format_mib(3 * 1024 * 1024, 1), "3.0 MiB");
}

// ------------------------------------------------------------------ shapes
TEST(Shape, RankNumelAndText) {
  const Shape s{1, 28, 28};
  EXPECT_EQ(s.rank(), 3u);
  EXPECT_EQ(s.numel(), 784u);
  EXPECT_EQ(s.str(), "{1, 28, 28}");
  EXPECT_EQ(s.with_back(5), (Shape{1, 28, 5}));
  expect_contains(config_error([] { Shape(std::vector<std::size_t>{}); }), {"1 to 4"});
  expect_contains(config_error([] { Shape{1, 2, 3, 4, 5}; }), {"not 5"});
  expect_contains(config_error([] { Shape{3, 0}; }), {"dimension 1 is 0"});
}

TEST(Sequential, AShapeMismatchNamesTheLayerItsPositionAndBothShapes) {
  Sequential<float> m(Shape{3, 8});
  m.add(std::make_unique<Linear<float>>(8, 4));
  EXPECT_EQ(m.shape(1), (Shape{3, 4}));
  const std::string e = config_error([&] { m.add(std::make_unique<LayerNorm<float>>(5)); });
  expect_contains(e, {"layer 1", "LayerNorm(5)", "{3, 4}", "last dimension is 5"});
}

// Linear and LayerNorm act on the last dimension: a {T, C} sample is T rows.
TEST(Linear, PositionsAreRowsOfOneGemm) {
  const std::size_t batch = 3, T = 4, in = 5, out = 2;
  Bound b(std::make_unique<Linear<double>>(in, out), batch, Shape{T, in}, 11);
  EXPECT_EQ(b.out, T * out);
  const Vec x = test::randn<double>(batch * T * in, 12), p = b.param_values(), y = b.forward(x);
  for (std::size_t r = 0; r < batch * T; ++r)
    for (std::size_t o = 0; o < out; ++o) {
      double want = p[out * in + o];
      for (std::size_t k = 0; k < in; ++k) want += x[r * in + k] * p[o * in + k];
      ASSERT_NEAR(y[r * out + o], want, 1e-12) << "row " << r;
    }
  check_gradients(b, x, 13);
}

TEST(LayerNorm, NormalisesEveryPositionOfASample) {
  const std::size_t batch = 2, T = 3, n = 6;
  Bound b(std::make_unique<LayerNorm<double>>(n), batch, Shape{T, n}, 3);
  const Vec x = test::randn<double>(batch * T * n, 4), p = b.param_values(), y = b.forward(x);
  for (std::size_t r = 0; r < batch * T; ++r) {
    double mean = 0, var = 0;
    for (std::size_t j = 0; j < n; ++j) mean += x[r * n + j] / n;
    for (std::size_t j = 0; j < n; ++j) var += (x[r * n + j] - mean) * (x[r * n + j] - mean) / n;
    for (std::size_t j = 0; j < n; ++j)
      ASSERT_NEAR(y[r * n + j], (x[r * n + j] - mean) / std::sqrt(var + 1e-5) * p[j] + p[n + j], 1e-12);
  }
  check_gradients(b, x, 5);
}

// ------------------------------------------------------------------ blocks
// y = x + W2 tanh(W1 x + b1) + b2, the reference of Residual(Linear, Tanh, Linear).
TEST(Block, ResidualMatchesItsReferenceAndFiniteDifferences) {
  const std::size_t batch = 3, n = 5, h = 7;
  std::vector<LayerPtr<double>> inner;
  inner.push_back(std::make_unique<Linear<double>>(n, h));
  inner.push_back(make_activation<double>(ActivationKind::tanh));
  inner.push_back(std::make_unique<Linear<double>>(h, n));
  Bound b(std::make_unique<Block<double>>(std::move(inner), true), batch, n, 21);
  const Vec x = test::randn<double>(batch * n, 22), p = b.param_values(), y = b.forward(x);
  const double* w1 = p.data();
  const double* b1 = w1 + h * n;
  const double* w2 = b1 + h;
  const double* b2 = w2 + n * h;
  for (std::size_t i = 0; i < batch; ++i) {
    Vec a(h);
    for (std::size_t j = 0; j < h; ++j) {
      double s = b1[j];
      for (std::size_t k = 0; k < n; ++k) s += w1[j * n + k] * x[i * n + k];
      a[j] = std::tanh(s);
    }
    for (std::size_t o = 0; o < n; ++o) {
      double s = b2[o];
      for (std::size_t j = 0; j < h; ++j) s += w2[o * h + j] * a[j];
      ASSERT_NEAR(y[i * n + o], x[i * n + o] + s, 1e-12);
    }
  }
  check_gradients(b, x, 23);
}

// A nested block (LayerNorm inside a Block inside a Residual) with GELU:
// gradients of every input and parameter against central differences.
TEST(Block, NestedBlocksMatchFiniteDifferences) {
  std::vector<LayerPtr<double>> norm;
  norm.push_back(std::make_unique<LayerNorm<double>>(4));
  norm.push_back(std::make_unique<Linear<double>>(4, 6));
  std::vector<LayerPtr<double>> inner;
  inner.push_back(std::make_unique<Block<double>>(std::move(norm), false));
  inner.push_back(make_activation<double>(ActivationKind::gelu));
  inner.push_back(std::make_unique<Linear<double>>(6, 4));
  Bound b(std::make_unique<Block<double>>(std::move(inner), true), 3, 4, 31);
  check_gradients(b, test::randn<double>(12, 32), 33);
}

TEST(Block, AResidualMustKeepItsShape) {
  std::vector<LayerPtr<float>> inner;
  inner.push_back(std::make_unique<Linear<float>>(6, 4));
  Sequential<float> m(6);
  const std::string e =
      config_error([&] { m.add(std::make_unique<Block<float>>(std::move(inner), true)); });
  expect_contains(e, {"layer 0", "{6}", "{4}", "keep the shape"});
}

// Two micro-batches in flight (pipeline slots): each backward uses what its
// own forward kept, so interleaving gives the gradients of running them one
// after the other.
TEST(Block, MicroBatchSlotsKeepTheirOwnActivations) {
  auto model = [] {
    return model_from_text(R"(
input = [5]
[[layers]]
type = "residual"
layers = [ { type = "layernorm" }, { type = "linear", out = 7 }, { type = "gelu" }, { type = "linear", out = 5 } ]
)", "slots");
  };
  const Vec x0 = test::randn<double>(10, 1), x1 = test::randn<double>(10, 2);
  Context ctx;
  auto run = [&](Sequential<double>& m, bool interleave) {
    auto a = test::to_device(x0, 2, 5), b = test::to_device(x1, 2, 5);
    auto fill = [&](std::size_t slot) { Kokkos::deep_copy(m.output_grad(slot), 1.0); };
    if (interleave) {
      m.forward(ctx, a, 0);
      m.forward(ctx, b, 1, false);
      fill(1);
      m.backward(ctx, {}, 1);
      fill(0);
      m.backward(ctx, {}, 0);
    } else {
      for (std::size_t s = 0; s < 2; ++s) {
        m.forward(ctx, s == 0 ? a : b, s, s == 0);
        fill(s);
        m.backward(ctx, {}, s);
      }
    }
    Kokkos::fence();
    return test::to_host(m.grads());
  };
  auto one = model(), two = model();
  one.build(2, 2);
  two.build(2, 2);
  one.init(Init::kaiming_uniform, 3);
  two.init(Init::kaiming_uniform, 3);
  one.zero_grad(ctx);
  two.zero_grad(ctx);
  const Vec g1 = run(one, false), g2 = run(two, true);
  ASSERT_EQ(g1.size(), g2.size());
  // Same sums in another order: the last bits may differ.
  for (std::size_t i = 0; i < g1.size(); ++i) ASSERT_NEAR(g1[i], g2[i], 1e-12 * (1 + std::fabs(g1[i])));
}

// ------------------------------------------------------------------ names
const char* kResidual = R"(
name = "res"
input = [8]
[[layers]]
name = "stem"
type = "linear"
out = 6
[[layers]]
name = "blocks"
type = "residual"
repeat = 2
layers = [ { type = "layernorm" }, { type = "linear", out = 3, name = "fc1" }, { type = "relu" },
           { type = "dropout", p = 0.1 }, { type = "linear", out = 6, bias = false } ]
[[layers]]
type = "linear"
out = 2
)";

// Parameter pieces (layers/param_pieces.hpp): the leaf layers holding
// parameters, in flat order; a backward calls them in reverse, a recomputing
// block its pieces forward again first, and the model calls its hooks in
// exactly the order piece_calls lists. Units may end inside a block: with
// the block's values in two unit buffers, the outputs and gradients are
// bitwise those of the flat buffers. Oracles: the lists worked by hand, the
// flat model.
TEST(Sequential, PiecesAreTheLeafLayersAndUnitsMayEndInsideABlock) {
  auto model = [] {
    auto m = model_from_text(R"(
input = [5]
[[layers]]
type = "linear"
out = 7
[[layers]]
type = "residual"
layers = [ { type = "layernorm" }, { type = "linear", out = 9 }, { type = "gelu" }, { type = "linear", out = 7 } ]
[[layers]]
type = "gelu"
[[layers]]
type = "linear"
out = 3
)", "pieces");
    set_recompute(m.layer(1), true);
    return m;
  };
  auto flat = model(), units = model();
  // Linear 5->7 (42 values), LayerNorm(7) (14), Linear 7->9 (72), Linear 9->7 (70), Linear 7->3 (24).
  EXPECT_EQ(flat.piece_offsets(), (std::vector<std::size_t>{0, 42, 56, 128, 198, 222}));
  using P = Pass;
  const std::vector<PieceCall> forward{{0, P::forward}, {1, P::forward}, {2, P::forward}, {3, P::forward}, {4, P::forward}};
  const std::vector<PieceCall> backward{{4, P::backward}, {1, P::recompute}, {2, P::recompute}, {3, P::recompute},
                                        {3, P::backward}, {2, P::backward}, {1, P::backward}, {0, P::backward}};
  EXPECT_EQ(flat.piece_calls(false), forward);
  EXPECT_EQ(flat.piece_calls(true), backward);
  EXPECT_EQ(flat.layer_of(41), 0u);
  EXPECT_EQ(flat.layer_of(42), 1u);
  EXPECT_EQ(flat.layer_of(221), 3u);

  // The block's LayerNorm and first Linear in one unit, its second Linear
  // with the head in another (each alone in its buffer: init writes it).
  BuildOptions b;
  b.max_batch = 3;
  b.param_units = b.grad_units = {{0, 2, 0}, {2, 3, 1}, {3, 5, 2}};
  units.build(b);
  flat.build(3);
  flat.init(Init::kaiming_uniform, 4);
  units.init(Init::kaiming_uniform, 4);
  std::vector<PieceCall> calls;
  std::vector<std::size_t> done;
  units.set_piece_hooks({[&](std::size_t p, Pass pass) { calls.push_back({p, pass}); },
                         [&](std::size_t p) { done.push_back(p); }});
  Context ctx;
  const Vec x = test::randn<double>(15, 5);
  auto run = [&](Sequential<double>& m) {
    const auto xd = test::to_device(x, 3, 5);  // backward reads it
    const Vec y = test::to_host(m.forward(ctx, xd));
    Kokkos::deep_copy(m.output_grad(), 1.0);
    m.backward(ctx);
    Kokkos::fence();
    return y;
  };
  EXPECT_EQ(run(units), run(flat));
  std::vector<PieceCall> both = forward;
  both.insert(both.end(), backward.begin(), backward.end());
  EXPECT_EQ(calls, both);
  EXPECT_EQ(done, (std::vector<std::size_t>{4, 3, 2, 1, 0}));
  const Vec g = test::to_host(flat.grads());
  for (std::size_t u = 0, at = 0; u < 3; ++u) {
    const Vec gu = test::to_host(units.unit_grads(u));
    for (std::size_t k = 0; k < gu.size(); ++k, ++at) ASSERT_EQ(gu[k], g[at]) << "unit " << u << " value " << k;
  }
}

TEST(Names, ParametersAndBuffersAreNamedAsPyTorchWould) {
  auto m = build_model<float>(parse_model(kResidual, "res.toml"), 1);
  std::vector<std::string> names;
  std::size_t next = 0;
  for (const auto& p : m.parameters()) {
    names.push_back(p.name + " " + p.shape.str() + (p.group == ParamGroup::decay ? "" : " no-decay"));
    EXPECT_EQ(p.offset, next) << p.name;
    next += p.shape.numel();
  }
  EXPECT_EQ(next, m.num_params());
  const std::vector<std::string> want{
      "stem.weight {6, 8}", "stem.bias {6} no-decay",
      "blocks.0.0.weight {6} no-decay", "blocks.0.0.bias {6} no-decay",
      "blocks.0.fc1.weight {3, 6}", "blocks.0.fc1.bias {3} no-decay", "blocks.0.4.weight {6, 3}",
      "blocks.1.0.weight {6} no-decay", "blocks.1.0.bias {6} no-decay",
      "blocks.1.fc1.weight {3, 6}", "blocks.1.fc1.bias {3} no-decay", "blocks.1.4.weight {6, 3}",
      "3.weight {2, 6}", "3.bias {2} no-decay"};
  EXPECT_EQ(names, want);
  std::vector<std::string> buffers;
  for (const auto& b : m.buffers()) buffers.push_back(b.name);
  EXPECT_EQ(buffers, (std::vector<std::string>{"blocks.0.3.calls", "blocks.1.3.calls"}));
  // Buffers move by name; a missing or unknown name is an error naming it.
  m.write_buffers({{"blocks.0.3.calls", {5}}, {"blocks.1.3.calls", {7}}});
  EXPECT_EQ(m.read_buffers().at("blocks.1.3.calls"), std::vector<double>{7});
  expect_contains(config_error([&] { m.write_buffers({{"blocks.0.3.calls", {5}}}); }),
                  {"blocks.1.3.calls"});
  expect_contains(config_error([&] {
                    m.write_buffers({{"blocks.0.3.calls", {5}}, {"blocks.1.3.calls", {7}}, {"x.calls", {1}}});
                  }),
                  {"no buffer 'x.calls'"});
}

// ------------------------------------------------------------------ model files
// --layers and the equivalent file: the same names and the same initial
// values, so the same outputs (dropout included: Dropout k draws with seed + k).
TEST(ModelFile, TheLayersShorthandIsTheEquivalentFile) {
  const std::string file = std::string(STRATA_SOURCE_DIR) + "/models/fashion-mlp.toml";
  auto a = build_model<float>(read_model_file(file), 9);
  auto b = make_mlp<float>({{784, 256, 128, 10}, ActivationKind::relu, 0.0, 9});
  ASSERT_EQ(a.num_layers(), b.num_layers());
  for (std::size_t i = 0; i < a.num_layers(); ++i) EXPECT_EQ(a.layer(i).name(), b.layer(i).name());
  std::vector<std::string> na, nb;
  for (const auto& p : a.parameters()) na.push_back(p.name);
  for (const auto& p : b.parameters()) nb.push_back(p.name);
  EXPECT_EQ(na, nb);

  auto with_dropout = build_model<float>(parse_model(R"(
input = [6]
[[layers]]
type = "linear"
out = 8
[[layers]]
type = "tanh"
[[layers]]
type = "dropout"
p = 0.4
[[layers]]
type = "linear"
out = 8
[[layers]]
type = "tanh"
[[layers]]
type = "dropout"
p = 0.4
[[layers]]
type = "linear"
out = 3
)", "text"), 5);
  auto mlp = make_mlp<float>({{6, 8, 8, 3}, ActivationKind::tanh, 0.4, 5});
  Context ctx;
  const auto x = test::to_device(test::randn<float>(4 * 6, 3), 4, 6);
  for (auto* m : {&with_dropout, &mlp}) {
    m->build(4);
    m->init(Init::kaiming_uniform, 5);
  }
  EXPECT_EQ(test::to_host(with_dropout.params()), test::to_host(mlp.params()));
  EXPECT_EQ(test::to_host(with_dropout.forward(ctx, x)), test::to_host(mlp.forward(ctx, x)));
}

TEST(ModelFile, EveryShippedModelBuilds) {
  std::size_t n = 0;
  for (const auto& entry : fs::directory_iterator(std::string(STRATA_SOURCE_DIR) + "/models")) {
    if (entry.path().extension() != ".toml") continue;
    const ModelSpec spec = read_model_file(entry.path().string());
    auto m = build_model<float>(spec, 1);
    EXPECT_GT(m.num_params(), 0u) << entry.path();
    EXPECT_FALSE(spec.name.empty()) << entry.path() << " has no name";
    ++n;
  }
  EXPECT_GE(n, 3u);
}

// The parameter counts and names the CNN files' comments state (counted by
// hand there from the layer shapes).
TEST(ModelFile, CnnFilesHaveTheParametersTheirCommentsState) {
  const std::string dir = std::string(STRATA_SOURCE_DIR) + "/models/";
  auto cnn = build_model<float>(read_model_file(dir + "cnn-fashion.toml"), 1);
  EXPECT_EQ(cnn.num_params(), 421738u);
  auto resnet = build_model<float>(read_model_file(dir + "resnet-fashion.toml"), 1);
  std::set<std::string> names;
  std::size_t n = 0;
  for (const auto& p : resnet.parameters()) {
    names.insert(p.name);
    n += p.shape.numel();
  }
  EXPECT_EQ(n, resnet.num_params());
  for (const char* name : {"stem.weight", "stem_bn.weight", "stage1.0.0.0.weight", "down.weight",
                           "stage2.1.0.4.bias", "head.bias"})
    EXPECT_EQ(names.count(name), 1u) << name;
}

// Each bad file: the error names the file, the line and the key.
TEST(ModelFile, ErrorsNameTheFileTheLineAndTheKey) {
  struct Case {
    const char* text;
    std::initializer_list<const char*> parts;
  };
  const Case cases[] = {
      {"input = [4]\n[[layers]]\ntype = \"linear\"\nout = 3\n[[layers\n", {"m.toml:5"}},
      {"[[layers]]\ntype = \"linear\"\nout = 3\n", {"m.toml", "input = [784]"}},
      {"input = [4]\n", {"m.toml", "no layers"}},
      {"input = [4]\ncolour = 3\n[[layers]]\ntype = \"relu\"\n", {"m.toml:2", "key 'colour'", "unknown key"}},
      {"input = [0]\n[[layers]]\ntype = \"relu\"\n", {"m.toml:1", "key 'input'", "positive"}},
      {"input = [4]\n[[layers]]\ntype = \"lineer\"\nout = 3\n",
       {"m.toml:2", "unknown layer type 'lineer'", "known: ", "linear"}},
      {"input = [4]\n[[layers]]\nout = 3\n", {"m.toml:2", "key 'type'"}},
      {"input = [4]\n[[layers]]\ntype = \"linear\"\nouts = 3\n",
       {"m.toml:2", "needs the key 'out'", "keys given: outs"}},
      {"input = [4]\n[[layers]]\ntype = \"linear\"\nout = 3\nouts = 3\n",
       {"m.toml:5", "key 'outs'", "unknown option", "'linear'"}},
      {"input = [4]\n[[layers]]\ntype = \"linear\"\nout = \"ten\"\n",
       {"m.toml:4", "key 'out'", "positive integer"}},
      {"input = [4]\n[[layers]]\ntype = \"linear\"\nout = -3\n", {"m.toml:4", "key 'out'"}},
      {"input = [4]\n[[layers]]\ntype = \"linear\"\n", {"m.toml:2", "needs the key 'out'"}},
      {"input = [4]\n[[layers]]\ntype = \"dropout\"\np = 1.5\n", {"m.toml:4", "key 'p'", "[0, 1)"}},
      {"input = [4]\n[[layers]]\ntype = \"relu\"\nrepeat = 0\n", {"m.toml:4", "key 'repeat'"}},
      {"input = [4]\n[[layers]]\ntype = \"relu\"\nname = \"a.b\"\n", {"m.toml:4", "key 'name'"}},
      {"input = [4]\n[[layers]]\ntype = \"residual\"\n", {"m.toml:2", "needs inner layers"}},
      {"input = [4]\n[[layers]]\ntype = \"relu\"\nlayers = [ { type = \"relu\" } ]\n",
       {"m.toml:2", "no inner layers"}},
      {"input = [4]\n[[layers]]\ntype = \"residual\"\nlayers = [\n  { type = \"linear\", out = 3 },\n]\n",
       {"m.toml:2", "keep the shape", "{4}", "{3}"}},
      {"input = [4]\n[[layers]]\ntype = \"residual\"\nlayers = [\n  { type = \"linear\", size = 3 },\n]\n",
       {"m.toml:5", "needs the key 'out'", "keys given: size"}},
      {"input = [2, 4]\n[[layers]]\ntype = \"linear\"\nout = 3\n[[layers]]\ntype = \"layernorm\"\n"
       "[[layers]]\ntype = \"linear\"\nout = 3\n[[layers]]\ntype = \"linear\"\nout = 3\nbias = 1\n",
       {"m.toml:13", "key 'bias'", "true or false"}},
      {"input = [4]\n[[layers]]\nname = \"fc\"\ntype = \"linear\"\nout = 4\n[[layers]]\nname = \"fc\"\n"
       "type = \"linear\"\nout = 4\n",
       {"m.toml", "layer 1 (Linear(4, 4))", "the name 'fc' is taken by layer 0"}},
      {"input = [4]\n[[layers]]\nname = \"1\"\ntype = \"relu\"\n[[layers]]\ntype = \"relu\"\n",
       {"the name '1' is taken by layer 0"}},
      {"input = [4]\n[[layers]]\ntype = \"residual\"\nlayers = [\n  { type = \"residual\", recompute = true, "
       "layers = [ { type = \"relu\" } ] },\n]\n",
       {"m.toml:5", "key 'recompute'", "only a top-level block recomputes"}},
      {"input = [4]\n# a comment may say anything: \xc3\xa9\n[[layers]]\ntype = \"relu\xc2\xad\"\n",
       {"m.toml:4", "not ASCII (byte 0xc2) outside a comment"}},
      {"input = [4]\n[[layers]]\ntype = \"relu\"\n\xef\xbb\xbf\n", {"m.toml:4", "not ASCII (byte 0xef)"}},
  };
  // Non-ASCII in comments is fine, a byte-order mark may open the file, and
  // a multi-line string may end in quotes of its own.
  EXPECT_EQ(parse_model("\xef\xbb\xbfinput = [4]\nname = \"\"\"a \"\"\"\"\" # \xc3\xa9\n[[layers]]\ntype = \"relu\"\n", "m.toml")
                .name,
            "a \"\"");
  EXPECT_EQ(build_model<float>(parse_model("# \xc3\xa9t\xc3\xa9\ninput = [4] # \xe2\x80\x94\n[[layers]]\n"
                                           "type = \"relu\" # 'quoted' \"text\"\n",
                                           "m.toml"), 1)
                .num_layers(),
            1u);
  for (const auto& c : cases) {
    const std::string e = config_error([&] { build_model<float>(parse_model(c.text, "m.toml"), 1); });
    EXPECT_FALSE(e.empty()) << c.text;
    expect_contains(e, c.parts);
  }
  expect_contains(config_error([] { read_model_file("no/such/model.toml"); }),
                  {"no/such/model.toml", "cannot be opened"});
}

// ------------------------------------------------------------------ checkpoints by name
class CheckpointByName : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("strata-test-models-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

ModelTable table(std::initializer_list<std::pair<const char*, Shape>> params,
                 std::vector<BufferInfo> buffers = {}, bool mlp = false) {
  ModelTable t;
  std::size_t at = 0;
  for (const auto& [name, shape] : params) {
    t.params.push_back({name, shape, at, ParamGroup::decay});
    at += shape.numel();
  }
  t.buffers = std::move(buffers);
  t.mlp = mlp;
  return t;
}

TEST_F(CheckpointByName, TensorsAreFoundByNameAndAMissingOneIsNamed) {
  const ModelTable written = table({{"a.weight", Shape{2, 2}}, {"b.bias", Shape{3}}},
                                   {{"d.calls", 1}});
  Snapshot snap;
  snap.optimizer_steps = 4;
  snap.buffers = {{"d.calls", {12}}};
  checkpoint::State s = checkpoint_state("{\"seed\":1}", Position{4, 1, 2}, snap, written);
  s.params = {1, 2, 3, 4, 5, 6, 7};
  s.opt0 = {10, 20, 30, 40, 50, 60, 70};
  const std::string file = checkpoint::save(dir_.string(), 4, s, 1);

  // The same tensors in another order: the values follow the names.
  const ModelTable reordered = table({{"b.bias", Shape{3}}, {"a.weight", Shape{2, 2}}}, {{"d.calls", 1}});
  const auto [got, pos] = read_checkpoint(file, "{\"seed\":1}", reordered);
  EXPECT_EQ(got.params, (std::vector<float>{5, 6, 7, 1, 2, 3, 4}));
  EXPECT_EQ(got.opt0, (std::vector<float>{50, 60, 70, 10, 20, 30, 40}));
  EXPECT_TRUE(got.opt1.empty());
  EXPECT_EQ(got.buffers.at("d.calls"), std::vector<double>{12});
  EXPECT_EQ(pos.step, 4u);
  EXPECT_EQ(pos.index, 2u);
  EXPECT_EQ(got.optimizer_steps, 4);

  // A renamed layer, another shape, a missing buffer, another configuration.
  expect_contains(config_error([&] {
                    read_checkpoint(file, "{\"seed\":1}",
                                    table({{"a.weight", Shape{2, 2}}, {"c.bias", Shape{3}}}, {{"d.calls", 1}}));
                  }),
                  {file.c_str(), "no tensor 'c.bias'", "{3}"});
  expect_contains(config_error([&] {
                    read_checkpoint(file, "{\"seed\":1}",
                                    table({{"a.weight", Shape{4}}, {"b.bias", Shape{3}}}, {{"d.calls", 1}}));
                  }),
                  {"tensor 'a.weight' has shape {2, 2}", "{4}"});
  expect_contains(config_error([&] {
                    read_checkpoint(file, "{\"seed\":1}",
                                    table({{"a.weight", Shape{2, 2}}, {"b.bias", Shape{3}}}, {{"e.calls", 1}}));
                  }),
                  {"no buffer 'e.calls'"});
  expect_contains(config_error([&] { read_checkpoint(file, "{\"seed\":2}", reordered); }),
                  {"seed = 1", "seed = 2"});
}

// Strata 0.1's checkpoints (format 1: no names, Dropout counters by position)
// are read for the MLP of --layers and refused, naming the version, for any
// other model.
TEST_F(CheckpointByName, Format1IsReadForTheMlpAndRefusedOtherwise) {
  checkpoint::State s;
  s.config = R"({"layers":[2,2]})";
  s.state = R"({"step":3,"epoch":0,"index":3,"optimizer_steps":3,"dropout_calls":[3]})";
  s.params = {1, 2, 3, 4, 5, 6};
  const std::string file = checkpoint::save(dir_.string(), 3, s, 1);
  const auto mlp = table({{"0.weight", Shape{2, 2}}, {"0.bias", Shape{2}}}, {{"2.calls", 1}}, true);
  const auto [got, pos] = read_checkpoint(file, R"({"layers":[2,2]})", mlp);
  EXPECT_EQ(got.params, s.params);
  EXPECT_EQ(got.buffers.at("2.calls"), std::vector<double>{3});
  EXPECT_EQ(pos.step, 3u);
  auto other = mlp;
  other.mlp = false;
  expect_contains(config_error([&] { read_checkpoint(file, "{}", other); }),
                  {"Strata 0.1", "format 1", "[2,2]"});
}

}  // namespace
}  // namespace strata
