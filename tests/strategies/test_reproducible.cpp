// --reproducible (strategies/reproducible.hpp): the same bits whatever the
// layout. Each run trains 20 steps through the Engine (what strata-train
// runs) and writes a checkpoint; the losses, the parameters and the
// checkpoint's payload (parameters, both optimizer states) of every layout
// are compared with memcmp against one rank with one thread. The oracle that
// the mode trains the model at all: the default single-rank run, to within
// rounding. And the default mode, on the same layouts, does differ in the
// last bits (so these tests can tell).
#include "backends/comm/self.hpp"
#include "backends/ranks.hpp"
#include "repro_harness.hpp"
#include "test_utils.hpp"

#include <gtest/gtest.h>

#include <filesystem>

#include <unistd.h>

namespace strata {
namespace {

using test::Bits;
using test::DpConfig;
using test::RunResult;
using test::compare_bits;
using test::train_engine;

// A layout: thread ranks x threads per rank, and what the engine options add.
struct Layout {
  std::string name;
  int ranks = 1, threads = 1;
  EngineOptions options;
  GemmBackend gemm = GemmBackend::vendor;  // portable where no vendor BLAS is built in
};

Bits run_layout(const DpConfig& c, const Layout& l, const std::string& tag,
                const std::string& resume = "", std::string* checkpoint = nullptr) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("strata-test-repro-" + std::to_string(::getpid()) + "-" + tag))
                              .string();
  std::filesystem::remove_all(dir);
  Bits out;
  run_ranks(l.ranks, l.threads, [&](Context& rank_ctx, comm::Communicator& comm) {
    const GemmBackend gemm = Blas::vendor_available() ? l.gemm : GemmBackend::portable;
    Context ctx(gemm, rank_ctx.exec);
    ctx.threads = rank_ctx.threads;
    auto r = train_engine(ctx, comm, c, l.options, dir, resume);
    if (comm.rank() == 0) out = r;
  });
  // The caller takes the checkpoint (and removes it).
  if (checkpoint) *checkpoint = dir + "/" + checkpoint::file_name(c.steps);
  else std::filesystem::remove_all(dir);
  return out;
}

EngineOptions reproducible(std::size_t chunk) {
  EngineOptions o;
  o.reproducible_chunk = chunk;
  return o;
}

// The MLP with Dropout, a batch of 24 (whole chunks of 2 on 1 to 4 ranks).
DpConfig mlp_config() {
  DpConfig c;
  c.dropout = 0.2;
  c.batch = 24;
  c.samples = 72;
  return c;
}

// A model-parallel layout of dp x pp x tp thread ranks.
Layout mesh_layout(std::size_t chunk, int dp, int pp, int tp, std::size_t micro,
                   Schedule schedule = Schedule::one_f_one_b, int zero = 0) {
  EngineOptions o = reproducible(chunk);
  o.model_parallel = true;
  o.mesh.mesh = {dp, pp, tp};
  o.mesh.micro_batches = micro;
  o.mesh.schedule = schedule;
  o.mesh.zero = zero;
  std::string name = "dp" + std::to_string(dp) + " x pp" + std::to_string(pp) + " x tp" +
                     std::to_string(tp) + ", " + std::to_string(micro) + " micro-batches, " +
                     to_string(schedule) + (zero ? ", ZeRO-" + std::to_string(zero) : std::string());
  return {name, dp * pp * tp, 1, o};
}

// ZeRO-1 (and ZeRO-2 and 3, whose gradients stay flat under --reproducible) over 3
// ranks in units of whole layers of at least 16 values: the gradients
// reduce-scattered unit by unit, uneven units through padded copies.
Layout sharded_in_units(std::size_t chunk, int zero) {
  Layout l = mesh_layout(chunk, 3, 1, 1, 1, Schedule::one_f_one_b, zero);
  l.options.mesh.bucket_bytes = 64;
  l.name += ", ZeRO-" + std::to_string(zero) + " in 64-byte units";
  return l;
}

// Pipelines of 2 and 3 stages (GPipe, 1F1B), ZeRO-1 (one unit, and units of
// layers over 3 ranks), a dp2 x pp2 mesh.
std::vector<Layout> model_parallel_layouts(std::size_t chunk) {
  return {sharded_in_units(chunk, 1), sharded_in_units(chunk, 2), sharded_in_units(chunk, 3),
          mesh_layout(chunk, 1, 2, 1, 3, Schedule::gpipe),
          mesh_layout(chunk, 1, 2, 1, 4),
          mesh_layout(chunk, 1, 3, 1, 2),
          mesh_layout(chunk, 2, 1, 1, 1, Schedule::one_f_one_b, 1),
          mesh_layout(chunk, 2, 2, 1, 2),
          mesh_layout(chunk, 2, 2, 1, 3, Schedule::one_f_one_b, 1)};
}

// Tensor parallelism with the tensor chunk: tp2, tp2 x dp2 with ZeRO-1, a
// pp2 x tp2 pipeline (GPipe), and 2 data-parallel thread ranks (the
// data-parallel engine, whose layers run whole).
std::vector<Layout> tensor_parallel_layouts(std::size_t chunk, std::size_t tp_chunk) {
  std::vector<Layout> v{mesh_layout(chunk, 1, 1, 2, 1), mesh_layout(chunk, 2, 1, 2, 1,
                                                                    Schedule::one_f_one_b, 1),
                        mesh_layout(chunk, 1, 2, 2, 2, Schedule::gpipe),
                        {"2 thread ranks", 2, 1, reproducible(chunk)}};
  for (Layout& l : v) l.options.reproducible_tp_chunk = tp_chunk;
  return v;
}

std::vector<Layout> data_parallel_layouts(std::size_t chunk) {
  std::vector<Layout> v;
  for (auto [ranks, threads] : std::vector<std::pair<int, int>>{{1, 4}, {2, 1}, {2, 2}, {3, 1}, {4, 1}})
    v.push_back({std::to_string(ranks) + " thread rank(s) x " + std::to_string(threads) + " thread(s)",
                 ranks, threads, reproducible(chunk)});
  Layout other{"1 rank, the portable GEMM backend", 1, 1, reproducible(chunk), GemmBackend::portable};
  v.push_back(other);
  return v;
}

TEST(Reproducible, MlpIsBitwiseTheSameOnAnyNumberOfThreadRanksAndThreads) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  const DpConfig c = mlp_config();
  const Bits one = run_layout(c, {"1 rank", 1, 1, reproducible(2)}, "mlp1");
  ASSERT_EQ(one.losses.size(), c.steps);
  // It trains the model: the default single-rank run, within rounding.
  RunResult as_run;
  as_run.losses = one.losses;
  as_run.params = one.params;
  EXPECT_EQ(test::compare(as_run, test::train_single(c), 1e-4), "");
  for (const Layout& l : data_parallel_layouts(2))
    EXPECT_EQ(compare_bits(run_layout(c, l, "mlp"), one), "") << l.name;
}

TEST(Reproducible, MlpIsBitwiseTheSameInPipelinesZeroAndMeshes) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  DpConfig c = mlp_config();
  // Clipping: the gradient norm is summed over stages and ZeRO blocks too
  // (with SGD, whose steps scale with it, unlike Adam's).
  c.optimizer = {OptimizerKind::sgd, 0.1};
  c.optimizer.momentum = 0.9;
  auto clipped = [](Layout l) {
    l.options.data.clip_grad_norm = l.options.mesh.clip_grad_norm = 0.05;
    return l;
  };
  const Bits one = run_layout(c, clipped({"1 rank", 1, 1, reproducible(2)}), "mp1");
  for (const Layout& l : model_parallel_layouts(2))
    EXPECT_EQ(compare_bits(run_layout(c, clipped(l), "mp"), one), "") << l.name;
}

// Every layout of data_parallel_layouts and model_parallel_layouts against
// one rank, and that one rank against the default single-rank run (within
// `rel`: it trains the same model).
void expect_every_layout_bitwise(const DpConfig& c, std::size_t chunk, const std::string& tag,
                                 double rel = 1e-4) {
  const Bits one = run_layout(c, {"1 rank", 1, 1, reproducible(chunk)}, tag + "1");
  ASSERT_EQ(one.losses.size(), c.steps);
  RunResult as_run;
  as_run.losses = one.losses;
  as_run.params = one.params;
  EXPECT_EQ(test::compare(as_run, test::train_single(c), rel), "") << tag;
  std::vector<Layout> all = data_parallel_layouts(chunk);
  for (const Layout& l : model_parallel_layouts(chunk)) all.push_back(l);
  for (const Layout& l : all)
    EXPECT_EQ(compare_bits(run_layout(c, l, tag), one), "") << tag << ": " << l.name;
}

// The residual MLP (LayerNorm, GELU, Dropout in residual blocks).
TEST(Reproducible, ResidualModelIsBitwiseTheSameOnEveryLayout) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  DpConfig c = mlp_config();
  c.model = test::residual_model(true);
  expect_every_layout_bitwise(c, 2, "residual");
}

// The GPT: embeddings (the position table too), attention, LayerNorm,
// Dropout, the head tied to the token embedding (across stages in the
// pipelines); a chunk of one sample (6 tokens).
TEST(Reproducible, GptIsBitwiseTheSameOnEveryLayout) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  DpConfig c = test::gpt_config(true);
  c.batch = 12;
  c.samples = 72;
  expect_every_layout_bitwise(c, 1, "gpt");
}

// A CNN without BatchNorm (convolutions with biases, pooling).
TEST(Reproducible, CnnIsBitwiseTheSameOnEveryLayout) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  DpConfig c = mlp_config();
  c.features = 72;
  c.model = R"(input = [2, 6, 6]
[[layers]]
type = "conv2d"
out = 4
kernel = 3
padding = 1
[[layers]]
type = "relu"
[[layers]]
type = "maxpool2d"
kernel = 2
[[layers]]
type = "conv2d"
out = 5
kernel = 3
[[layers]]
type = "relu"
[[layers]]
type = "global_avgpool"
[[layers]]
type = "linear"
out = 3
)";
  expect_every_layout_bitwise(c, 2, "cnn");
}

// The CNN with SyncBatchNorm (statistics of the whole batch, exact sums over
// the ranks; no convolution biases): every data-parallel layout, running
// statistics included (in the checkpoint's buffers, compared through the
// parameters' training and the losses; the model-parallel engine has no
// SyncBatchNorm).
TEST(Reproducible, CnnWithSyncBatchNormIsBitwiseTheSameOnEveryDataParallelLayout) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  DpConfig c = mlp_config();
  c.features = 72;
  c.model = test::batchnorm_cnn_model(true);
  const Bits one = run_layout(c, {"1 rank", 1, 1, reproducible(2)}, "bn1");
  RunResult as_run;
  as_run.losses = one.losses;
  as_run.params = one.params;
  EXPECT_EQ(test::compare(as_run, test::train_single(c), 1e-4), "");
  for (const Layout& l : data_parallel_layouts(2))
    EXPECT_EQ(compare_bits(run_layout(c, l, "bn"), one), "") << "SyncBatchNorm, " << l.name;
}

// BatchNorm of each rank's own samples changes with the split: refused,
// named by its place in the model, with the way out.
TEST(Reproducible, BatchNormRefusesTheModeByName) {
  DpConfig c = mlp_config();
  c.features = 72;
  c.model = test::batchnorm_cnn_model(false);
  Context ctx;
  comm::SelfComm self;
  try {
    test::train_engine(ctx, self, c, reproducible(2), "unused");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config);
    EXPECT_NE(std::string(e.what()).find("layer 1 (BatchNorm"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("use SyncBatchNorm (--sync-bn"), std::string::npos) << e.what();
  }
}

// In bf16 (16-bit activations, working weights rounded, fp32 master
// weights), on the residual model: every layout gives the same bits too.
TEST(Reproducible, Bf16IsBitwiseTheSameOnEveryLayout) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  DpConfig c = mlp_config();
  c.model = test::residual_model(true);
  auto bf16 = [](Layout l) {
    l.options.data.precision = l.options.mesh.precision = Precision::bf16;
    return l;
  };
  const Bits one = run_layout(c, bf16({"1 rank", 1, 1, reproducible(2)}), "bf16-1");
  std::vector<Layout> all = data_parallel_layouts(2);
  for (const Layout& l : model_parallel_layouts(2)) all.push_back(l);
  for (const Layout& l : all)
    EXPECT_EQ(compare_bits(run_layout(c, bf16(l), "bf16"), one), "") << "bf16, " << l.name;
  const Bits fp32 = run_layout(c, {"1 rank", 1, 1, reproducible(2)}, "bf16-fp32");
  EXPECT_NE(compare_bits(fp32, one), "") << "bf16 was not in effect";
}

// A checkpoint of 10 steps on 2 ranks, resumed on 3 ranks for 10 more (and
// on a 2-stage pipeline): bitwise the 20 steps of one rank, losses of the
// last 10 included.
TEST(Reproducible, AResumeOnAnotherRankCountContinuesBitwise) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  DpConfig c = mlp_config();
  const Bits whole = run_layout(c, {"1 rank", 1, 1, reproducible(2)}, "resume-whole");
  DpConfig half = c;
  half.steps = 10;
  std::string checkpoint;
  run_layout(half, {"2 ranks", 2, 1, reproducible(2)}, "resume-first", "", &checkpoint);
  Bits tail = whole;
  tail.losses.erase(tail.losses.begin(), tail.losses.begin() + 10);
  EXPECT_EQ(compare_bits(run_layout(c, {"3 ranks", 3, 1, reproducible(2)}, "resume-3", checkpoint), tail), "")
      << "resumed on 3 ranks";
  EXPECT_EQ(compare_bits(run_layout(c, mesh_layout(2, 1, 2, 1, 2), "resume-pp", checkpoint), tail), "")
      << "resumed on a 2-stage pipeline";
  std::filesystem::remove_all(std::filesystem::path(checkpoint).parent_path());
}

// The single-rank strategy on its own (Local, what the examples use), with
// the model set reproducible and the context's arithmetic: the engine's bits.
TEST(Reproducible, LocalStrategyGivesTheEnginesBits) {
  DpConfig c = mlp_config();
  c.dropout = 0;  // Local gives no row offsets: Dropout's masks are the engine's only with them
  const Bits engine = run_layout(c, {"1 rank", 1, 1, reproducible(2)}, "local-engine");
  const auto d = test::dp_data(c);
  Context ctx;
  enable_reproducible(ctx);
  auto model = build_model<float>(test::model_of(c), c.seed);
  BuildOptions build;
  build.max_batch = c.batch;
  build.numerics.exact_chunk = 2;
  model.build(build);
  model.init(Init::kaiming_uniform, c.seed);
  SoftmaxCrossEntropy<float> loss;
  Optimizer<float> opt(c.optimizer, model.num_params());
  Local<float> local(ctx, model, loss, opt);
  data::BatchLoader<float> loader(d, c.batch, true, c.seed, true);
  std::vector<double> losses;
  data::Batch<float> b;
  for (std::size_t s = 0, epoch = 0; s < c.steps;) {
    loader.seek(epoch++, 0);
    while (s < c.steps && loader.next(b)) {
      losses.push_back(local.step(b));
      ++s;
    }
  }
  Bits mine = engine;
  mine.losses = losses;
  mine.params = test::to_host(model.params());
  EXPECT_EQ(compare_bits(mine, engine), "");
}

// Tensor parallelism splits sums over features (a column-parallel layer's
// input gradient, a row-parallel layer's output, the vocabulary-parallel
// softmax): with the tensor chunk they are exact too (and with sequence
// parallelism on the GPT: tp2, dp2 x tp2 ZeRO-1, pp2 x tp2). The MLP (Linear(12,
// 16) column-, Linear(16, 8) row-parallel, chunks of 4 features) and the GPT
// with a vocabulary tp divides (embedding, head and loss split by token id;
// chunks of 2 features: a rank holds 4 of each head group's 8 features), and
// with one it pads.
// The oracle: one rank with the same chunks, which trains the model as the
// default mode does (within rounding). And the default mode differs on tp2.
TEST(Reproducible, TensorParallelIsBitwiseTheSameWithATensorChunk) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  struct Case {
    const char* tag;
    DpConfig c;
    std::size_t chunk, tp_chunk;
  };
  DpConfig gpt = test::gpt_config(true, 2, 12);
  gpt.batch = 12;
  gpt.samples = 72;
  DpConfig padded = gpt;  // vocabulary 11: padded to 12 on tp2 (VocabSplit)
  padded.model = test::gpt_model(true, 2, 11);
  padded.classes = 11;
  for (const Case& k : {Case{"tp-mlp", mlp_config(), 2, 4}, Case{"tp-gpt", gpt, 1, 2},
                        Case{"tp-gpt-padded", padded, 1, 2}}) {
    EngineOptions o = reproducible(k.chunk);
    o.reproducible_tp_chunk = k.tp_chunk;
    const Bits one = run_layout(k.c, {"1 rank", 1, 1, o}, std::string(k.tag) + "1");
    ASSERT_EQ(one.losses.size(), k.c.steps);
    RunResult as_run;
    as_run.losses = one.losses;
    as_run.params = one.params;
    EXPECT_EQ(test::compare(as_run, test::train_single(k.c), 1e-4), "") << k.tag;
    for (const Layout& l : tensor_parallel_layouts(k.chunk, k.tp_chunk))
      EXPECT_EQ(compare_bits(run_layout(k.c, l, k.tag), one), "") << k.tag << ": " << l.name;
    if (std::string(k.tag) != "tp-gpt") continue;
    // Sequence parallelism: the LayerNorm and bias gradients summed over
    // the ranks' positions as exact pairs, the reduce-scatters of exact pairs.
    for (Layout l : {mesh_layout(k.chunk, 1, 1, 2, 1),
                     mesh_layout(k.chunk, 2, 1, 2, 1, Schedule::one_f_one_b, 1),
                     mesh_layout(k.chunk, 1, 2, 2, 2, Schedule::gpipe)}) {
      l.options.reproducible_tp_chunk = k.tp_chunk;
      l.options.mesh.sequence_parallel = true;
      EXPECT_EQ(compare_bits(run_layout(k.c, l, k.tag), one), "")
          << k.tag << ": " << l.name << ", sequence parallel";
    }
  }
  EngineOptions plain;
  plain.model_parallel = true;
  plain.mesh.mesh = {1, 1, 2};
  EXPECT_NE(compare_bits(run_layout(mlp_config(), {"tp2", 2, 1, plain}, "tp-default"),
                         run_layout(mlp_config(), {"1 rank", 1, 1, EngineOptions()}, "tp-default1")),
            "")
      << "the default mode gave the same bits on tp2 and one rank";
}

// --tp without a tensor chunk, and a chunk that a rank's shard is not whole
// chunks of, are refused before training, naming the option and the layer.
TEST(Reproducible, TensorParallelNeedsATensorChunkThatDividesTheShards) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  const auto error_of = [](std::size_t tp_chunk) {
    Layout l = mesh_layout(2, 1, 1, 2, 1);
    l.options.reproducible_tp_chunk = tp_chunk;
    try {
      run_layout(mlp_config(), l, "tp-bad");
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::config);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string none = error_of(0), odd = error_of(16);
  EXPECT_NE(none.find("--reproducible with --tp 2 needs --tp-chunk"), std::string::npos) << none;
  EXPECT_NE(odd.find("--tp-chunk 16: ColumnParallelLinear(12, 16"), std::string::npos) << odd;
  EXPECT_NE(odd.find("holds 8 output features on a rank"), std::string::npos) << odd;
}

// Without --reproducible the same layouts differ in the last bits (the
// batch sums are split another way): what makes the tests above able to
// fail.
TEST(Reproducible, TheDefaultModeDiffersAcrossRankCounts) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  const DpConfig c = mlp_config();
  const Bits one = run_layout(c, {"1 rank", 1, 1, EngineOptions()}, "default1");
  const Bits two = run_layout(c, {"2 ranks", 2, 1, EngineOptions()}, "default2");
  EXPECT_NE(compare_bits(two, one), "") << "the default mode gave the same bits on 1 and 2 ranks";
  RunResult a, b;
  a.losses = one.losses, a.params = one.params;
  b.losses = two.losses, b.params = two.params;
  EXPECT_EQ(test::compare(a, b, 1e-4), "") << "but the same training within rounding";
}

// Bad layouts are refused before training, naming the shards and a batch
// that would do.
TEST(Reproducible, AShardOfPartChunksIsAConfigError) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  DpConfig c = mlp_config();
  c.batch = 20;  // 7, 7, 6 on 3 ranks
  try {
    run_layout(c, {"3 ranks", 3, 1, reproducible(2)}, "bad");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config);
    const std::string m = e.what();
    EXPECT_NE(m.find("shards of 7, 7, 6 samples"), std::string::npos) << m;
    EXPECT_NE(m.find("multiple of 6 (3 x 2)"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace strata
