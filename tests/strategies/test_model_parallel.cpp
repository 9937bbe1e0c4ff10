// Model parallelism on thread ranks against single-rank training of the same
// model on the same global batches (losses and whole-model parameters within
// 1e-5 relative after 20 fp32 steps): pipelines of 2-4 stages with 1, 4 and 7
// micro-batches under both schedules, tensor parallelism over 2 and 4 ranks
// (MLPs, residual blocks and a GPT: heads, vocabulary, parallel
// cross-entropy), ZeRO-1 over 2 and 3 ranks, and the meshes dp2 x pp2,
// dp2 x tp2 and pp2 x tp2. Also the activation bound of 1F1B, the memory
// budget, and the errors for impossible configurations.
#include "backends/comm/self.hpp"
#include "backends/ranks.hpp"
#include "dp_harness.hpp"
#include "strategies/gradient_reduce_scatter.hpp"
#include "strategies/shard_map.hpp"
#include "strategies/strategy_kind.hpp"
#include "strategies/vocab_parallel.hpp"

#include <gtest/gtest.h>

#include <array>
#include <tuple>

namespace strata {
namespace {

using test::DpConfig;
using test::RunResult;

// Runs body on world_size thread ranks; returns world rank 0's result and
// checks that every rank returned the same parameters.
RunResult on_threads(int world_size, const DpConfig& c, const ModelParallelOptions& o,
                     std::vector<MemoryReport>* memory = nullptr,
                     std::vector<std::size_t>* peaks = nullptr) {
  RunResult result;
  if (memory) memory->assign(world_size, {});
  if (peaks) peaks->assign(world_size, 0);
  run_ranks(world_size, 1, [&](Context& ctx, comm::Communicator& comm) {
    MemoryReport m;
    std::size_t peak = 0;
    auto r = test::train_model_parallel(ctx, comm, c, o, &m, &peak);
    if (memory) (*memory)[comm.rank()] = m;
    if (peaks) (*peaks)[comm.rank()] = peak;
    if (comm.rank() == 0) result = r;
    auto first = r.params;
    comm.broadcast(first.data(), first.size(), comm::DataType::f32, 0);
    EXPECT_EQ(r.params, first) << "rank " << comm.rank() << " holds other parameters than rank 0";
  });
  return result;
}

std::string error_of(int world_size, const DpConfig& c, const ModelParallelOptions& o);

ModelParallelOptions mesh(int dp, int pp, int tp) {
  ModelParallelOptions o;
  o.mesh = {dp, pp, tp};
  return o;
}

// ------------------------------------------------------------------ pipeline
using PipelineCase = std::tuple<int, std::size_t, Schedule>;
class Pipeline : public ::testing::TestWithParam<PipelineCase> {};

TEST_P(Pipeline, MatchesSingleRankTraining) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  const auto [stages, micro, schedule] = GetParam();
  DpConfig c;
  auto o = mesh(1, stages, 1);
  o.micro_batches = micro;
  o.schedule = schedule;
  std::vector<MemoryReport> memory;
  std::vector<std::size_t> peaks;
  // One micro-batch runs exactly the single-rank computation: bitwise equal.
  EXPECT_EQ(test::compare(on_threads(stages, c, o, &memory, &peaks), test::train_single(c),
                          micro == 1 ? 0.0 : 1e-5),
            "");
  // Stored activations: GPipe keeps every micro-batch, 1F1B at most
  // stages - p on stage p (both bounded by the micro-batches of a step).
  for (int p = 0; p < stages; ++p) {
    const std::size_t bound = schedule == Schedule::gpipe
                                  ? micro
                                  : std::min<std::size_t>(micro, std::size_t(stages - p));
    EXPECT_EQ(memory[p].slots, bound) << "stage " << p;
    EXPECT_LE(peaks[p], bound) << "stage " << p;
    EXPECT_EQ(peaks[p], std::min<std::size_t>(bound, c.batch)) << "stage " << p;
  }
}

INSTANTIATE_TEST_SUITE_P(StagesMicroBatchesSchedules, Pipeline,
                         ::testing::Combine(::testing::Values(2, 3, 4),
                                            ::testing::Values(std::size_t(1), std::size_t(4),
                                                              std::size_t(7)),
                                            ::testing::Values(Schedule::gpipe,
                                                              Schedule::one_f_one_b)),
                         [](const ::testing::TestParamInfo<PipelineCase>& info) {
                           return "S" + std::to_string(std::get<0>(info.param)) + "_M" +
                                  std::to_string(std::get<1>(info.param)) + "_" +
                                  (std::get<2>(info.param) == Schedule::gpipe ? "gpipe" : "1f1b");
                         });

// Every schedule's action lists, by themselves: each stage runs each
// micro-batch's forward once and its backward once after it; the slots are
// the bound of the schedule (GPipe M, 1F1B min(M, S - p)); and the stages
// running their lists at once finish, on a model of the pipeline's
// dependencies (a forward needs the previous stage's forward of the same
// micro-batch, a backward the next stage's backward; sends never block).
TEST(PipelineSchedule, ListsRunEveryMicroBatchOnceWithoutADeadlock) {
  for (Schedule schedule : {Schedule::gpipe, Schedule::one_f_one_b})
    for (std::size_t S = 1; S <= 5; ++S)
      for (std::size_t M = 1; M <= 9; ++M) {
        const std::string what = std::string(to_string(schedule)) + " S " + std::to_string(S) +
                                 " M " + std::to_string(M);
        std::vector<std::vector<PipelineAction>> lists;
        for (std::size_t p = 0; p < S; ++p) {
          lists.push_back(schedule_actions(schedule, S, p, M));
          std::vector<int> forwards(M), backwards(M);
          for (const PipelineAction& a : lists.back()) {
            ASSERT_LT(a.micro, M) << what;
            if (a.kind == PipelineAction::forward) ++forwards[a.micro];
            else {
              EXPECT_EQ(forwards[a.micro], 1) << what << ": backward before forward, stage " << p;
              ++backwards[a.micro];
            }
          }
          EXPECT_EQ(forwards, std::vector<int>(M, 1)) << what << ", stage " << p;
          EXPECT_EQ(backwards, std::vector<int>(M, 1)) << what << ", stage " << p;
          EXPECT_EQ(schedule_slots(schedule, S, p, M),
                    schedule == Schedule::gpipe ? M : std::min(M, S - p))
              << what << ", stage " << p;
        }
        // done[p][kind][m]; each round every stage runs its next action if
        // what it receives has been sent.
        std::vector<std::array<std::vector<bool>, 2>> done(S, {std::vector<bool>(M), std::vector<bool>(M)});
        std::vector<std::size_t> next(S, 0);
        for (bool progress = true; progress;) {
          progress = false;
          for (std::size_t p = 0; p < S; ++p) {
            if (next[p] == lists[p].size()) continue;
            const PipelineAction a = lists[p][next[p]];
            const bool ready = a.kind == PipelineAction::forward
                                   ? p == 0 || done[p - 1][0][a.micro]
                                   : p + 1 == S || done[p + 1][1][a.micro];
            if (!ready) continue;
            done[p][a.kind == PipelineAction::forward ? 0 : 1][a.micro] = true;
            ++next[p];
            progress = true;
          }
        }
        for (std::size_t p = 0; p < S; ++p)
          EXPECT_EQ(next[p], lists[p].size()) << what << ": stage " << p << " waits forever";
      }
  EXPECT_THROW(parse_schedule("zero-bubble"), Error);
}

// The residual model file (6 top-level layers; the blocks stay whole on a
// stage) through pipelines, ZeRO-1, a dp x pp mesh and tensor parallelism
// (the Linear pair inside each residual block column- then row-parallel,
// with its Dropout on the shard).
// The strategy names and their mesh rules (strategies/strategy_kind.hpp),
// against the rule written out case by case.
TEST(StrategyKind, NamesMeshDefaultsAndContradictions) {
  for (const char* name : {"auto", "local", "dp", "pipeline", "tensor", "hybrid", "plan"})
    EXPECT_STREQ(to_string(parse_strategy(name)), name);
  auto message = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::config);
      return e.message();
    }
    return "";
  };
  const std::string unknown = message([] { parse_strategy("ddp"); });
  EXPECT_NE(unknown.find("'ddp'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("hybrid"), std::string::npos) << unknown;
  auto same = [](const MeshShape& a, const MeshShape& b) {
    return a.dp == b.dp && a.pp == b.pp && a.tp == b.tp;
  };
  // Defaults on 8 ranks: pipeline and tensor take every rank unless --dp is given.
  EXPECT_TRUE(same(mesh_for(StrategyKind::pipeline, {}, 8), MeshShape{1, 8, 1}));
  EXPECT_TRUE(same(mesh_for(StrategyKind::tensor, {}, 8), MeshShape{1, 1, 8}));
  EXPECT_TRUE(same(mesh_for(StrategyKind::pipeline, {2, 0, 0, 0}, 8), MeshShape{2, 1, 1}));
  EXPECT_TRUE(same(mesh_for(StrategyKind::hybrid, {0, 2, 2, 0}, 8), MeshShape{2, 2, 2}));
  EXPECT_TRUE(same(mesh_for(StrategyKind::automatic, {}, 8), MeshShape{8, 1, 1}));
  EXPECT_NE(message([] { mesh_for(StrategyKind::hybrid, {0, 3, 1, 0}, 8); }).find("does not divide"),
            std::string::npos);
  EXPECT_TRUE(needs_mesh(StrategyKind::pipeline) && needs_mesh(StrategyKind::tensor) &&
              needs_mesh(StrategyKind::hybrid));
  EXPECT_FALSE(needs_mesh(StrategyKind::dp) || needs_mesh(StrategyKind::local) ||
               needs_mesh(StrategyKind::automatic));
  // Contradictions, each naming the strategy that allows the combination.
  EXPECT_NE(message([] { check_factors(StrategyKind::local, {0, 0, 0, 1}); }).find("hybrid"),
            std::string::npos);
  EXPECT_NE(message([] { check_factors(StrategyKind::dp, {0, 2, 0, 0}); }).find("--strategy dp"),
            std::string::npos);
  EXPECT_NE(message([] { check_factors(StrategyKind::pipeline, {0, 0, 2, 0}); }).find("--tp"),
            std::string::npos);
  EXPECT_NE(message([] { check_factors(StrategyKind::tensor, {0, 2, 0, 0}); }).find("--pp"),
            std::string::npos);
  EXPECT_EQ(message([] { check_factors(StrategyKind::hybrid, {2, 2, 2, 1}); }), "");
  EXPECT_EQ(message([] { check_factors(StrategyKind::dp, {4, 0, 0, 1}); }), "");
}

TEST(ResidualModel, PipelinesAndMeshesMatchSingleRank) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  DpConfig c;
  c.model = test::residual_model(true);
  const auto single = test::train_single(c);
  for (int stages : {2, 3})
    for (Schedule schedule : {Schedule::gpipe, Schedule::one_f_one_b}) {
      auto o = mesh(1, stages, 1);
      o.micro_batches = 3;
      o.schedule = schedule;
      EXPECT_EQ(test::compare(on_threads(stages, c, o), single, 1e-5), "")
          << stages << " stages, " << to_string(schedule);
    }
  auto z = mesh(2, 1, 1);
  z.zero = 1;
  EXPECT_EQ(test::compare(on_threads(2, c, z), single, 1e-5), "") << "ZeRO-1";
  auto m = mesh(2, 2, 1);
  m.micro_batches = 2;
  EXPECT_EQ(test::compare(on_threads(4, c, m), single, 1e-5), "") << "dp2 x pp2";
  EXPECT_EQ(test::compare(on_threads(2, c, mesh(1, 1, 2)), single, 1e-5), "") << "tp2";
}

// A small CNN on 3 x 2 x 2 "images" (the 12 features of DpConfig): a
// padded 2x2 convolution, ReLU, max and average pooling, flatten and a
// head; with `batchnorm`, BatchNorm2d after the convolution.
std::string cnn_model(bool batchnorm) {
  return std::string(R"(
input = [3, 2, 2]
[[layers]]
type = "conv2d"
out = 4
kernel = 2
padding = 1
)") + (batchnorm ? "[[layers]]\ntype = \"batchnorm\"\n" : "") + R"(
[[layers]]
type = "relu"
[[layers]]
type = "maxpool2d"
kernel = 2
stride = 1
[[layers]]
type = "avgpool2d"
kernel = [1, 2]
[[layers]]
type = "flatten"
[[layers]]
name = "head"
type = "linear"
out = 3
)";
}

// Convolutions and pooling through pipelines, ZeRO-1, data parallelism and
// a dp x pp mesh (tensor parallelism replicates them).
TEST(CnnModel, PipelinesAndMeshesMatchSingleRank) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  DpConfig c;
  c.model = cnn_model(false);
  const auto single = test::train_single(c);
  auto p = mesh(1, 2, 1);
  p.micro_batches = 3;
  EXPECT_EQ(test::compare(on_threads(2, c, p), single, 1e-5), "") << "2 stages";
  auto z = mesh(2, 1, 1);
  z.zero = 1;
  EXPECT_EQ(test::compare(on_threads(2, c, z), single, 1e-5), "") << "ZeRO-1";
  EXPECT_EQ(test::compare(on_threads(2, c, mesh(2, 1, 1)), single, 1e-5), "") << "dp2";
  auto m = mesh(2, 2, 1);
  m.micro_batches = 2;
  EXPECT_EQ(test::compare(on_threads(4, c, m), single, 1e-5), "") << "dp2 x pp2";
  EXPECT_EQ(test::compare(on_threads(2, c, mesh(1, 1, 2)), single, 1e-5), "") << "tp2";
}

// BatchNorm normalises with the samples a micro-batch holds: a pipeline of
// one micro-batch is the single-rank computation, bitwise.
TEST(CnnModel, BatchNormPipelineOfOneMicroBatchIsBitwiseSingleRank) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  DpConfig c;
  c.model = cnn_model(true);
  auto p = mesh(1, 3, 1);
  p.micro_batches = 1;
  EXPECT_EQ(test::compare(on_threads(3, c, p), test::train_single(c), 0.0), "");
}

// Recomputation changes where the blocks' inner activations live, not what
// is computed: bitwise the same losses and parameters on one rank, on data
// parallel thread ranks and on pipelines (micro-batches in flight share the
// arena; Dropout inside the blocks draws the same masks), with less memory.
TEST(ResidualModel, RecomputationIsBitwiseTheSameWithLessActivationMemory) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  DpConfig c;
  c.model = test::residual_model(true);
  const auto plain = test::train_single(c);
  DpConfig r = c;
  r.recompute = true;
  EXPECT_EQ(test::compare(test::train_single(r), plain, 0.0), "") << "one rank";
  auto dp_on_2 = [](const DpConfig& config) {
    test::RunResult dp;
    run_ranks(2, 1, [&](Context& ctx, comm::Communicator& comm) {
      auto result = test::train_dp(ctx, comm, config);
      if (comm.rank() == 0) dp = result;
    });
    return dp;
  };
  EXPECT_EQ(test::compare(dp_on_2(r), dp_on_2(c), 0.0), "") << "2 data-parallel ranks";
  for (Schedule schedule : {Schedule::gpipe, Schedule::one_f_one_b}) {
    auto o = mesh(1, 2, 1);
    o.micro_batches = 3;
    o.schedule = schedule;
    std::vector<MemoryReport> with, without;
    const auto a = on_threads(2, r, o, &with), b = on_threads(2, c, o, &without);
    EXPECT_EQ(test::compare(a, b, 0.0), "") << to_string(schedule);
    // A stage of one block and one slot (1F1B's last) saves nothing: the
    // arena is that block's one set of inner activations.
    for (int p = 0; p < 2; ++p)
      EXPECT_LE(with[p].activations, without[p].activations) << "stage " << p;
    EXPECT_LT(with[0].activations, without[0].activations) << to_string(schedule);
  }
  // With real bf16 activation storage (the blocks round their insides).
  DataParallelOptions bf16;
  bf16.precision = Precision::bf16;
  comm::SelfComm self;
  Context ctx;
  EXPECT_EQ(test::compare(test::train_dp(ctx, self, r, bf16), test::train_dp(ctx, self, c, bf16), 0.0), "")
      << "bf16 storage";
  auto m = build_model<float>(test::model_of(c), 1);
  auto mr = build_model<float>(with_recompute(test::model_of(c), true), 1);
  BuildOptions b;
  b.max_batch = 10;
  b.slots = 3;
  EXPECT_LT(mr.activation_bytes(b), m.activation_bytes(b));
  const std::size_t promised = mr.activation_bytes(b);
  mr.build(b);
  EXPECT_EQ(mr.allocated_activation_bytes(), promised);
}

// Per-position labels cut into micro-batches with their samples.
TEST(PerPositionLabels, PipelineMatchesSingleRank) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  DpConfig c;
  c.model = test::per_position_model();
  c.classes = 5;
  c.label_width = 3;
  auto o = mesh(1, 2, 1);
  o.micro_batches = 3;
  EXPECT_EQ(test::compare(on_threads(2, c, o), test::train_single(c), 1e-5), "");
}

// A GPT with dropout and a tied head under ZeRO-1 (2 data-parallel ranks,
// optimizer state sharded) and with per-block recomputation.
TEST(Gpt, ZeroAndRecomputationMatchSingleRank) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  const DpConfig c = test::gpt_config(true);
  auto o = mesh(2, 1, 1);
  o.zero = 1;
  EXPECT_EQ(test::compare(on_threads(2, c, o), test::train_single(c), 1e-5), "") << "ZeRO-1";
  DpConfig r = c;
  r.recompute = true;
  EXPECT_EQ(test::compare(test::train_single(r), test::train_single(c), 0.0), "") << "recompute";
}

// The state of a tied GPT moves between layouts in single-rank layout (the
// tied weight once, under the embedding's name): ZeRO-1 on 2 ranks, or a
// 2-stage pipeline (whose last stage holds a copy), for 10 steps, then one
// rank for 10 more, against 20 single-rank steps; and the checkpoint shards
// of the pipeline cover the model exactly once (the copy in none).
TEST(Gpt, StateMovesBetweenLayoutsInSingleRankLayout) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  DpConfig c = test::gpt_config(false);  // FullState holds no Dropout pass counters
  const auto single20 = [&] {
    DpConfig d = c;
    d.steps = 20;
    return test::train_single(d);
  }();
  auto zero = mesh(2, 1, 1);
  zero.zero = 1;
  auto pipeline = mesh(1, 2, 1);
  pipeline.micro_batches = 2;
  const std::size_t n = build_model<float>(test::model_of(c), 1).num_params();
  for (const auto& first : {zero, pipeline}) {
    c.steps = 10;
    test::FullState half;
    std::vector<ModelParallel<float>::CheckpointShard> shards(2);
    run_ranks(2, 1, [&](Context& ctx, comm::Communicator& comm) {
      test::FullState mine;
      test::train_model_parallel(ctx, comm, c, first, nullptr, nullptr, nullptr, &mine,
                                 &shards[static_cast<std::size_t>(comm.rank())]);
      if (comm.rank() == 0) half = mine;
    });
    ASSERT_EQ(half.params.size(), n);
    std::vector<int> covered(n, 0);
    for (const auto& sh : shards)
      for (const auto& [at, count] : sh.ranges)
        for (std::size_t k = at; k < at + count; ++k) ++covered[k];
    EXPECT_EQ(std::count(covered.begin(), covered.end(), 1), static_cast<std::ptrdiff_t>(n));
    c.steps = 20;
    RunResult second;
    run_ranks(1, 1, [&](Context& ctx, comm::Communicator& comm) {
      second = test::train_model_parallel(ctx, comm, c, mesh(1, 1, 1), nullptr, nullptr, &half);
    });
    RunResult tail{{single20.losses.begin() + 10, single20.losses.end()}, single20.params};
    EXPECT_EQ(test::compare(second, tail, 1e-5), "") << (first.zero ? "from ZeRO-1" : "from pp2");
    // Into a pipeline: the last stage's copy starts from the embedding's values and moments.
    RunResult piped;
    run_ranks(2, 1, [&](Context& ctx, comm::Communicator& comm) {
      auto r = test::train_model_parallel(ctx, comm, c, pipeline, nullptr, nullptr, &half);
      if (comm.rank() == 0) piped = r;
    });
    EXPECT_EQ(test::compare(piped, tail, 1e-5), "") << (first.zero ? "ZeRO-1" : "pp2") << " into pp2";
    EXPECT_EQ(piped.tie_drift, 0.0);
  }
}

// The tied head on the last stage and the token embedding on the first: the
// last stage keeps a copy, the two gradients are added before the
// data-parallel sum, and the copy stays bitwise equal to the original.
// Pipelines of 2 and 3 stages (1F1B and GPipe), a dp2 x pp2 mesh and ZeRO-1
// over two pipelines, with dropout, against single-rank training.
TEST(Gpt, PipelinesKeepTiedWeightsInSyncAndMatchSingleRank) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  const DpConfig c = test::gpt_config(true);
  const auto single = test::train_single(c);
  struct Case {
    const char* name;
    int dp, pp;
    std::size_t micro;
    Schedule schedule;
    int zero;
  };
  for (const Case k : {Case{"pp2 1f1b x3", 1, 2, 3, Schedule::one_f_one_b, 0},
                       Case{"pp3 1f1b x4", 1, 3, 4, Schedule::one_f_one_b, 0},
                       Case{"pp3 gpipe x2", 1, 3, 2, Schedule::gpipe, 0},
                       Case{"dp2 x pp2", 2, 2, 2, Schedule::one_f_one_b, 0},
                       Case{"dp2 x pp2 zero1", 2, 2, 1, Schedule::one_f_one_b, 1}}) {
    auto o = mesh(k.dp, k.pp, 1);
    o.micro_batches = k.micro;
    o.schedule = k.schedule;
    o.zero = k.zero;
    const auto r = on_threads(k.dp * k.pp, c, o);
    EXPECT_EQ(test::compare(r, single, 1e-5), "") << k.name;
    EXPECT_EQ(r.tie_drift, 0.0) << k.name << ": the copy of wte.weight drifted";
  }
}

// Megatron-style tensor parallelism of the GPT (with dropout; 4 heads and a
// vocabulary of 12, so that 2 and 4 ranks divide both): the attention split
// by heads (QKV column-parallel in three parts, the projection row-parallel),
// the MLP column then row, the embedding and the tied head over the
// vocabulary with the vocabulary-parallel cross-entropy. Alone on 2 and 4
// ranks, and in meshes: data parallel with ZeRO-1, and a pipeline whose
// last stage keeps a copy of its rank's vocabulary shard of the tied weight.
TEST(Gpt, TensorParallelMatchesSingleRank) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  const DpConfig c = test::gpt_config(true, 4, 12);
  const auto single = test::train_single(c);
  for (int tp : {2, 4})
    EXPECT_EQ(test::compare(on_threads(tp, c, mesh(1, 1, tp)), single, 1e-5), "") << "tp" << tp;
  auto z = mesh(2, 1, 2);
  z.zero = 1;
  EXPECT_EQ(test::compare(on_threads(4, c, z), single, 1e-5), "") << "dp2 x tp2 zero1";
  auto p = mesh(1, 2, 2);
  p.micro_batches = 3;
  const auto r = on_threads(4, c, p);
  EXPECT_EQ(test::compare(r, single, 1e-5), "") << "pp2 x tp2";
  EXPECT_EQ(r.tie_drift, 0.0) << "pp2 x tp2: a shard of wte.weight's copy drifted";
  // A vocabulary of 11 that 2 and 4 ranks do not divide: padded to 12 (a
  // row of zeros on the last rank at tp2, one on each of the last two at
  // tp4: shares of 3 rows, the last with 2), the padding's logits left out
  // of the softmax; and on a pp2 x tp2 pipeline, whose last stage keeps a
  // copy of its rank's padded shard of the tied weight.
  const DpConfig odd = test::gpt_config(true, 4, 11);
  const auto odd_single = test::train_single(odd);
  for (int tp : {2, 4})
    EXPECT_EQ(test::compare(on_threads(tp, odd, mesh(1, 1, tp)), odd_single, 1e-5), "")
        << "tp" << tp << ", vocabulary 11";
  const auto odd_pp = on_threads(4, odd, p);
  EXPECT_EQ(test::compare(odd_pp, odd_single, 1e-5), "") << "pp2 x tp2, vocabulary 11";
  EXPECT_EQ(odd_pp.tie_drift, 0.0) << "pp2 x tp2, vocabulary 11: the copy drifted";
}

// Sequence parallelism (Megatron-style) against single-rank training: the
// GPT of TensorParallelMatchesSingleRank (with Dropout, which then masks its
// rank's positions as the whole sequence would be masked) with its LayerNorms,
// Dropouts and residual stream on 3 of the 6 positions per rank between the
// tensor-parallel pairs: tp2 alone, in a dp2 x tp2 mesh with ZeRO-1 and 3, in
// a pp2 x tp2 pipeline (its stages pass sequence shards), with recomputation,
// with a vocabulary of 11 that 2 ranks split padded, and with a layer after
// the head (which then stays whole: the last block gathers the sequence).
// Tolerance as for tensor
// parallelism (1e-5 relative after 20 steps: the LayerNorm and bias gradients
// are summed over the ranks' positions in another order).
TEST(Gpt, SequenceParallelMatchesSingleRank) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  const DpConfig c = test::gpt_config(true, 4, 12);
  const auto single = test::train_single(c);
  auto sp = [](int dp, int pp, int tp) {
    auto o = mesh(dp, pp, tp);
    o.sequence_parallel = true;
    return o;
  };
  EXPECT_EQ(test::compare(on_threads(2, c, sp(1, 1, 2)), single, 1e-5), "") << "tp2";
  for (int zero : {1, 3}) {
    auto z = sp(2, 1, 2);
    z.zero = zero;
    EXPECT_EQ(test::compare(on_threads(4, c, z), single, 1e-5), "") << "dp2 x tp2 zero" << zero;
  }
  auto p = sp(1, 2, 2);
  p.micro_batches = 3;
  const auto r = on_threads(4, c, p);
  EXPECT_EQ(test::compare(r, single, 1e-5), "") << "pp2 x tp2";
  EXPECT_EQ(r.tie_drift, 0.0) << "pp2 x tp2: a shard of wte.weight's copy drifted";
  auto re = sp(1, 1, 2);
  re.recompute = true;
  EXPECT_EQ(test::compare(on_threads(2, c, re), single, 1e-5), "") << "tp2, recomputation";
  const DpConfig odd = test::gpt_config(true, 4, 11);
  EXPECT_EQ(test::compare(on_threads(2, odd, sp(1, 1, 2)), test::train_single(odd), 1e-5), "")
      << "tp2, vocabulary 11";
  // A LayerNorm after an untied head: the head stays whole, the region ends
  // at the last block, which gathers its output.
  DpConfig tail = c;
  tail.model.replace(tail.model.find("tie = \"wte\""), 11, "");
  tail.model += "[[layers]]\ntype = \"layernorm\"\n";
  EXPECT_EQ(test::compare(on_threads(2, tail, sp(1, 1, 2)), test::train_single(tail), 1e-5), "")
      << "tp2, a layer after the head";
}

// What sequence parallelism saves: the activations of the layers between the
// pairs are kept for a rank's positions only. The engine's accounting of
// the GPT at tp2 (32 samples, 6 positions) with and without it, against the
// activations of one rank; and a model whose blocks are not over positions
// (an MLP) or a layout without tensor parallelism is refused by name.
TEST(Gpt, SequenceParallelKeepsLessActivationMemory) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  DpConfig c = test::gpt_config(true, 4, 12);
  c.batch = 32;
  c.steps = 1;
  std::vector<MemoryReport> one, tp, sp;
  on_threads(1, c, mesh(1, 1, 1), &one);
  on_threads(2, c, mesh(1, 1, 2), &tp);
  auto o = mesh(1, 1, 2);
  o.sequence_parallel = true;
  on_threads(2, c, o, &sp);
  EXPECT_LT(sp[0].activations, tp[0].activations);
  EXPECT_LT(tp[0].activations, one[0].activations);
  EXPECT_EQ(sp[0].activations, sp[1].activations);
  const std::string mlp = error_of(2, DpConfig(), o);
  EXPECT_NE(mlp.find("sequence parallelism"), std::string::npos) << mlp;
  auto no_tp = mesh(2, 1, 1);
  no_tp.sequence_parallel = true;
  const std::string alone = error_of(2, c, no_tp);
  EXPECT_NE(alone.find("--sequence-parallel"), std::string::npos) << alone;
  EXPECT_NE(alone.find("--tp 2 or more"), std::string::npos) << alone;
}

// The GPT on a pp2 x tp2 mesh: its checkpoint shards cover the model exactly
// once (each tensor rank's vocabulary shard of the tied weight saved by the
// first stage only, not by the copy on the last) and hold the values
// gathered in single-rank layout, which continue on one rank: 10 steps on
// the mesh, then 10 on one rank, against 20 single-rank steps.
TEST(Gpt, TensorParallelStagesCheckpointInSingleRankLayout) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  // Vocabulary 12 (split evenly), then 11 (each rank 6 rows, the second's
  // last padding: the copy on the last stage gets 5 rows and a row of zeros).
  for (int vocab : {12, 11}) {
    SCOPED_TRACE("vocabulary " + std::to_string(vocab));
    DpConfig c = test::gpt_config(false, 4, vocab);  // FullState holds no Dropout pass counters
    const auto single20 = [&] {
      DpConfig d = c;
      d.steps = 20;
      return test::train_single(d);
    }();
    auto o = mesh(1, 2, 2);
    o.micro_batches = 2;
    c.steps = 10;
    const std::size_t n = build_model<float>(test::model_of(c), 1).num_params();
    test::FullState half;
    std::vector<ModelParallel<float>::CheckpointShard> shards(4);
    run_ranks(4, 1, [&](Context& ctx, comm::Communicator& comm) {
      test::FullState mine;
      test::train_model_parallel(ctx, comm, c, o, nullptr, nullptr, nullptr, &mine,
                                 &shards[static_cast<std::size_t>(comm.rank())]);
      if (comm.rank() == 0) half = mine;
    });
    ASSERT_EQ(half.params.size(), n);
    std::vector<int> covered(n, 0);
    std::size_t mismatches = 0;
    for (const auto& sh : shards) {
      std::size_t at = 0;
      for (const auto& [offset, count] : sh.ranges)
        for (std::size_t k = offset; k < offset + count; ++k, ++at) {
          ++covered[k];
          mismatches += sh.params[at] != half.params[k] || sh.opt0[at] != half.opt0[k];
        }
    }
    EXPECT_EQ(std::count(covered.begin(), covered.end(), 1), static_cast<std::ptrdiff_t>(n));
    EXPECT_EQ(mismatches, 0u);
    c.steps = 20;
    RunResult second;
    run_ranks(1, 1, [&](Context& ctx, comm::Communicator& comm) {
      second = test::train_model_parallel(ctx, comm, c, mesh(1, 1, 1), nullptr, nullptr, &half);
    });
    RunResult tail{{single20.losses.begin() + 10, single20.losses.end()}, single20.params};
    EXPECT_EQ(test::compare(second, tail, 1e-5), "") << "mesh, then one rank";
    // And back into the mesh: every tensor rank's copy of its shard of the
    // tied weight starts from the embedding's values and moments.
    RunResult again;
    run_ranks(4, 1, [&](Context& ctx, comm::Communicator& comm) {
      auto r = test::train_model_parallel(ctx, comm, c, o, nullptr, nullptr, &half);
      if (comm.rank() == 0) again = r;
    });
    EXPECT_EQ(test::compare(again, tail, 1e-5), "") << "mesh, then the mesh again";
    EXPECT_EQ(again.tie_drift, 0.0);
  }
}

// The vocabulary-parallel cross-entropy against the whole softmax
// cross-entropy: logits of 4 rows x 3 positions x V classes split by class
// over 2 and 4 thread ranks (each its block of every position's classes),
// with an ignored label and a position whose largest logit is on two ranks
// (ties go to the smallest class, as count_correct). V = 8 divides evenly;
// V = 7 is padded (VocabSplit: blocks of 4 at tp2, of 2 at tp4, the last
// rank's last class padding), and the padding holds logits of 50 that would
// win every softmax were they not left out; their gradient must be 0. The
// loss within 1e-6 relative and every gradient value within 1e-7 absolute
// (float sums of 8 exponentials in another order: a few ulps of values
// below 1), the number correct exactly.
TEST(VocabParallel, CrossEntropyMatchesTheWholeSoftmax) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  const std::size_t rows = 4, P = 3;
  for (const std::size_t V : {std::size_t{8}, std::size_t{7}}) {
    std::vector<float> z = test::randn<float>(rows * P * V, 5);
    std::vector<std::int32_t> labels{3, 0, 6, 5, -100, 2, 1, 6, 4, 0, 6, 3};
    if (V == 8) labels[2] = labels[10] = 7;
    z[1 * V + 0] = z[1 * V + 5] = 9.0f;  // position 1: a tie between classes 0 and 5
    Context ctx;
    LabelsBuffer dl("labels", labels.size());
    Kokkos::deep_copy(dl, test::to_device(labels));
    Targets<float> t;
    t.labels = dl;
    SoftmaxCrossEntropy<float> whole;
    MatrixBuffer<float> g("g", rows, P * V);
    const double want = whole.forward_backward(ctx, test::to_device(z, rows, P * V), t, g, 0.25f).value();
    const auto want_g = test::to_host(g);
    const std::size_t want_correct = count_correct<float>(ctx, test::to_device(z, rows, P * V), dl);
    EXPECT_GE(want_correct, 1u);  // position 1: label 0, tied with class 5, counts
    for (int tp : {2, 4}) {
      const VocabSplit split(V, tp);
      const std::size_t w = split.share;
      run_ranks(tp, 1, [&](Context& rctx, comm::Communicator& comm) {
        const std::size_t first = split.first(comm.rank()), held = split.held(comm.rank());
        std::vector<float> mine(rows * P * w, 50.0f);  // the padding's logits
        for (std::size_t i = 0; i < rows * P; ++i)
          for (std::size_t j = 0; j < held; ++j) mine[i * w + j] = z[i * V + first + j];
        VocabParallelCrossEntropy<float> loss(comm, first, V);
        MatrixBuffer<float> gm("g", rows, P * w);
        const auto out = test::to_device(mine, rows, P * w);
        const double got = loss.forward_backward(rctx, out, t, gm, 0.25f).value();
        EXPECT_NEAR(got, want, 1e-6 * std::fabs(want)) << "V " << V << " tp " << tp << " rank " << comm.rank();
        const auto got_g = test::to_host(gm);
        for (std::size_t i = 0; i < rows * P; ++i)
          for (std::size_t j = 0; j < w; ++j)
            EXPECT_NEAR(got_g[i * w + j], j < held ? want_g[i * V + first + j] : 0.0f, 1e-7)
                << "V " << V << " tp " << tp << " position " << i << " class " << first + j;
        EXPECT_EQ(loss.count_correct(rctx, out, dl), want_correct) << "V " << V << " tp " << tp;
      });
    }
  }
}

TEST(PipelineSchedules, GPipeAnd1F1BAreBitwiseIdenticalAndDeterministic) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  DpConfig c;
  c.steps = 8;
  auto o = mesh(1, 3, 1);
  o.micro_batches = 4;
  o.schedule = Schedule::gpipe;
  const auto gpipe = on_threads(3, c, o);
  o.schedule = Schedule::one_f_one_b;
  const auto a = on_threads(3, c, o), b = on_threads(3, c, o);
  EXPECT_EQ(a.params, b.params);
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.params, gpipe.params);
}

TEST(PipelineDropout, MasksMatchSingleRankTraining) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  DpConfig c;
  c.dropout = 0.3;
  auto o = mesh(1, 2, 1);
  o.micro_batches = 4;
  EXPECT_EQ(test::compare(on_threads(2, c, o), test::train_single(c), 1e-5), "");
}

TEST(PipelineCuts, GivenCutPointsAndFlopBalanceMatchSingleRank) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  DpConfig c;
  auto o = mesh(1, 2, 1);
  o.micro_batches = 3;
  o.cuts = {4};  // Linear, ReLU, Linear, ReLU | Linear
  EXPECT_EQ(test::compare(on_threads(2, c, o), test::train_single(c), 1e-5), "");
  o.cuts.clear();
  o.balance = Balance::flops;
  EXPECT_EQ(test::compare(on_threads(2, c, o), test::train_single(c), 1e-5), "");
}

TEST(PipelinePlan, BalancesByCostAndRespectsTensorParallelPairs) {
  // Costs 10, 0, 10, 0, 1: two stages split after the first activation.
  EXPECT_EQ(plan_stages({10, 0, 10, 0, 1}, {true, true, true, true, true}, 2, {}),
            (std::vector<std::size_t>{0, 2, 5}));
  // A column-parallel pair cannot be cut: 0-2 belong together.
  EXPECT_EQ(plan_stages({10, 0, 10, 0, 1}, {false, false, true, true, true}, 2, {}),
            (std::vector<std::size_t>{0, 3, 5}));
  EXPECT_EQ(plan_stages({1, 1, 1}, {true, true, true}, 3, {}),
            (std::vector<std::size_t>{0, 1, 2, 3}));
}

// ------------------------------------------------------------ tensor parallel
class TensorParallel : public ::testing::TestWithParam<int> {};

TEST_P(TensorParallel, MatchesSingleRankTraining) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  DpConfig c;
  EXPECT_EQ(test::compare(on_threads(GetParam(), c, mesh(1, 1, GetParam())),
                          test::train_single(c), 1e-5),
            "");
}

TEST_P(TensorParallel, ShardedDropoutMatchesSingleRankTraining) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  DpConfig c;
  c.dropout = 0.25;
  EXPECT_EQ(test::compare(on_threads(GetParam(), c, mesh(1, 1, GetParam())),
                          test::train_single(c), 1e-5),
            "");
}

INSTANTIATE_TEST_SUITE_P(Ranks, TensorParallel, ::testing::Values(2, 4));

// Splitting rebuilds blocks around their shards: a block keeps what the model
// file set on it (recomputation), and one holding shards maps them.
TEST(TensorParallel, SplitBlocksKeepTheirRecomputation) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  const ModelSpec spec = parse_model(R"(
input = [12]
[[layers]]
name = "blocks"
type = "residual"
recompute = true
layers = [{ type = "linear", out = 16 }, { type = "gelu" }, { type = "linear", out = 12 }]
)", "test model");
  run_ranks(2, 1, [&](Context&, comm::Communicator& tp) {
    auto split = make_tensor_parallel<float>(build_layers<float>(spec, 1), tp);
    const auto* block = dynamic_cast<const Block<float>*>(split.layers.at(0).get());
    ASSERT_NE(block, nullptr);
    EXPECT_TRUE(block->recomputes());
    ASSERT_NE(tensor_shard(*split.layers[0]), nullptr);
    EXPECT_EQ(tensor_shard(*split.layers[0])->full_num_params(), 12u * 16 + 16 + 16 * 12 + 12);
    EXPECT_EQ(split.layers[0]->num_params(), 12u * 8 + 8 + 12 * 8 + 12);  // halves, the row bias whole
  });
}

// -------------------------------------------------------------------- ZeRO-1
class Zero1 : public ::testing::TestWithParam<int> {};

TEST_P(Zero1, MatchesSingleRankTrainingWithShardedOptimizerState) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  DpConfig c;
  auto o = mesh(GetParam(), 1, 1);
  o.zero = 1;
  std::vector<MemoryReport> memory;
  EXPECT_EQ(test::compare(on_threads(GetParam(), c, o, &memory), test::train_single(c), 1e-5), "");
  // Adam keeps two moments: 2 x (padded parameters / ranks) per rank.
  const std::size_t n = 12 * 16 + 16 + 16 * 8 + 8 + 8 * 3 + 3;
  const std::size_t per = (n + GetParam() - 1) / GetParam();
  for (const auto& m : memory) EXPECT_EQ(m.optimizer, 2 * per * sizeof(float));
}

INSTANTIATE_TEST_SUITE_P(Ranks, Zero1, ::testing::Values(2, 3));

// --------------------------------------------------------------------- meshes
TEST(Mesh, DataParallelOfTwoStagePipelinesMatchesSingleRank) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  DpConfig c;
  auto o = mesh(2, 2, 1);
  o.micro_batches = 3;
  EXPECT_EQ(test::compare(on_threads(4, c, o), test::train_single(c), 1e-5), "");
}

TEST(Mesh, DataParallelOfTensorParallelPairsMatchesSingleRank) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  DpConfig c;
  c.batch = 11;  // uneven data-parallel shards
  EXPECT_EQ(test::compare(on_threads(4, c, mesh(2, 1, 2)), test::train_single(c), 1e-5), "");
}

TEST(Mesh, PipelineOfTensorParallelStagesWithZeroMatchesSingleRank) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  DpConfig c;
  c.widths = {12, 16, 8, 8, 3};
  auto o = mesh(1, 2, 2);
  o.micro_batches = 2;
  EXPECT_EQ(test::compare(on_threads(4, c, o), test::train_single(c), 1e-5), "");
  auto z = mesh(2, 1, 2);
  z.zero = 1;
  EXPECT_EQ(test::compare(on_threads(4, c, z), test::train_single(c), 1e-5), "");
}

// The mesh sums a stage's gradients over its data-parallel group with the
// same component as data parallelism (strategies/gradient_sync.hpp): bucket
// sizes and overlap with the last backward do not change a bit; bf16 or fp16
// buckets stay as close to uncompressed training as they do for data
// parallelism (the bounds of CompressedGradientsStayCloseToUncompressed in
// test_data_parallel.cpp), with half the payload.
TEST(Mesh, GradientBucketsOverlapAndCompressionAsInDataParallelism) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  DpConfig c;
  auto o = mesh(2, 2, 1);
  o.micro_batches = 3;
  o.bucket_bytes = 64;  // 16 floats: stages of 208 and 163 parameters make 13 and 11 buckets
  const auto tiny = on_threads(4, c, o);
  for (std::size_t bytes : {std::size_t(0), std::size_t(25) << 20}) {
    auto b = o;
    b.bucket_bytes = bytes;
    EXPECT_EQ(on_threads(4, c, b).params, tiny.params) << bytes << " bytes";
  }
  auto late = o;
  late.overlap = false;
  EXPECT_EQ(on_threads(4, c, late).params, tiny.params);
  const auto single = test::train_single(c);
  EXPECT_EQ(test::compare(tiny, single, 1e-5), "");
  for (GradCompression g : {GradCompression::bf16, GradCompression::fp16}) {
    auto z = o;
    z.compression = g;
    z.loss_scaling = g == GradCompression::fp16;
    z.scaler.init_scale = 1024;  // as in test_data_parallel.cpp: no step skipped
    const auto r = on_threads(4, c, z);
    const auto [dl, dp] = test::deviation_of_largest(r, single);
    std::printf("mesh dp2 x pp2, compression %s: loss deviation %.2e, parameter deviation %.2e\n",
                to_string(g), dl, dp);
    EXPECT_LT(dl, 2e-3) << to_string(g);
    EXPECT_LT(dp, 5e-3) << to_string(g);
    EXPECT_EQ(r.comm_bytes * 2, tiny.comm_bytes) << to_string(g);
  }
}

// ZeRO-1 reduce-scatters the gradients unit by unit during backward
// (strategies/shard_map.hpp): units of whole layers, the uneven ones (a
// size dp does not divide) through padded copies. Oracles: single-rank
// training (1e-5: float sums in another order over 20 steps), and the one-unit
// run bitwise where the sum of two ranks cannot depend on the split.
TEST(Mesh, ShardedGradientsInUnitsMatchSingleRank) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  DpConfig c;
  const auto single = test::train_single(c);
  for (int dp : {2, 3}) {
    auto o = mesh(dp, 1, 1);
    o.zero = 1;
    o.bucket_bytes = 0;  // one unit
    const auto whole = on_threads(dp, c, o);
    EXPECT_EQ(test::compare(whole, single, 1e-5), "") << "dp" << dp << ", one unit";
    for (std::size_t bytes : {std::size_t(64), std::size_t(1024)}) {
      for (bool overlap : {true, false}) {
        auto b = o;
        b.bucket_bytes = bytes;  // 64: a unit per layer with parameters (sizes 8x..., odd biases)
        b.overlap = overlap;
        const auto r = on_threads(dp, c, b);
        EXPECT_EQ(test::compare(r, single, 1e-5), "") << "dp" << dp << ", " << bytes << "-byte units";
        if (dp == 2) EXPECT_EQ(r.params, whole.params) << bytes << "-byte units, overlap " << overlap;
      }
    }
  }
  // Compression joins sharding: the units travel in 16 bits (half the bytes
  // of the same padded units in fp32).
  auto plain = mesh(2, 1, 1);
  plain.zero = 1;
  plain.bucket_bytes = 64;
  const std::size_t fp32_bytes = on_threads(2, c, plain).comm_bytes;
  for (GradCompression g : {GradCompression::bf16, GradCompression::fp16}) {
    auto z = plain;
    z.compression = g;
    z.loss_scaling = g == GradCompression::fp16;
    z.scaler.init_scale = 1024;  // as in test_data_parallel.cpp: no step skipped
    const auto r = on_threads(2, c, z);
    const auto [dl, dp] = test::deviation_of_largest(r, single);
    std::printf("ZeRO-1 dp2, compression %s: loss deviation %.2e, parameter deviation %.2e\n",
                to_string(g), dl, dp);
    // As the allreduce's compression above: bf16 keeps 8 bits of each sum.
    EXPECT_LT(dl, 2e-3) << to_string(g);
    EXPECT_LT(dp, 5e-3) << to_string(g);
    EXPECT_EQ(r.comm_bytes * 2, fp32_bytes) << to_string(g);
  }
}

// ZeRO-2 keeps no whole gradient buffer: units take turns in two buffers,
// each reduce-scattered into the shard in every backward. Oracles: ZeRO-1
// bitwise where both add the same two terms (2 ranks, one backward a step:
// the same units, the same sums), single-rank training (1e-5) where
// micro-batches are summed one by one, or 3 ranks sum in another order; the
// memory report worked by hand.
TEST(Mesh, Zero2KeepsTwoUnitsOfGradientsAndMatchesZero1) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  DpConfig c;  // layers of 208, 0, 136, 0 and 27 parameters
  const auto single = test::train_single(c);
  for (int dp : {2, 3}) {
    auto one = mesh(dp, 1, 1);
    one.zero = 1;
    one.bucket_bytes = 64;  // units of layers [0, 2), [2, 4), [4, 5)
    auto two = one;
    two.zero = 2;
    std::vector<MemoryReport> m1, m2;
    const auto r1 = on_threads(dp, c, one, &m1);
    const auto r2 = on_threads(dp, c, two, &m2);
    EXPECT_EQ(test::compare(r2, single, 1e-5), "") << "dp" << dp;
    if (dp == 2) {
      EXPECT_EQ(r2.params, r1.params);
      // Unit buffers: 208 (units 2 and 0 padded to 28 and 208, in turns) and
      // 136; the shard 104 + 68 + 14.
      for (const auto& m : m2) EXPECT_EQ(m.grads, (208 + 136 + 186) * sizeof(float));
      // ZeRO-1: the whole 371 gradients, the shard, unit 2's padded copy.
      for (const auto& m : m1) EXPECT_EQ(m.grads, (371 + 186 + 28) * sizeof(float));
    }
    auto late = two;
    late.overlap = false;
    EXPECT_EQ(on_threads(dp, c, late).params, r2.params) << "dp" << dp << " without overlap";
    // Micro-batches: each backward's units are reduce-scattered and added.
    auto micro = two;
    micro.micro_batches = 3;
    EXPECT_EQ(test::compare(on_threads(dp, c, micro), single, 1e-5), "") << "dp" << dp << " x 3 micro-batches";
  }
  // Compression: the units travel in bf16 (bounds as for ZeRO-1 above).
  auto z = mesh(2, 1, 1);
  z.zero = 2;
  z.bucket_bytes = 64;
  z.micro_batches = 2;
  z.compression = GradCompression::bf16;
  const auto [dl, dp] = test::deviation_of_largest(on_threads(2, c, z), single);
  EXPECT_LT(dl, 2e-3);
  EXPECT_LT(dp, 5e-3);
}

// ZeRO-3 keeps no whole parameter buffer either: the shard is the only copy,
// each unit gathered before its layers run. Oracles: ZeRO-2 bitwise (the
// gathered values are the values ZeRO-2 gathers into its flat buffer, the
// same sums), single-rank training (1e-5) with micro-batches and 3 ranks;
// the memory report worked by hand.
TEST(Mesh, Zero3GathersEachUnitAndMatchesZero2) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  DpConfig c;  // layers of 208, 0, 136, 0 and 27 parameters
  const auto single = test::train_single(c);
  for (int dp : {2, 3}) {
    auto two = mesh(dp, 1, 1);
    two.zero = 2;
    two.bucket_bytes = 64;  // units of layers [0, 2), [2, 4), [4, 5)
    auto three = two;
    three.zero = 3;
    std::vector<MemoryReport> m3;
    const auto r3 = on_threads(dp, c, three, &m3);
    EXPECT_EQ(test::compare(r3, single, 1e-5), "") << "dp" << dp;
    if (dp == 2) {
      EXPECT_EQ(r3.params, on_threads(dp, c, two).params);
      // Unit buffers of 208 and 136 values, the shard of 186: no whole buffer.
      for (const auto& m : m3) EXPECT_EQ(m.params, (208 + 136 + 186) * sizeof(float));
    }
    auto late = three;
    late.overlap = false;
    EXPECT_EQ(on_threads(dp, c, late).params, r3.params) << "dp" << dp << " without overlap";
    auto micro = three;
    micro.micro_batches = 3;
    EXPECT_EQ(test::compare(on_threads(dp, c, micro), single, 1e-5), "") << "dp" << dp << " x 3 micro-batches";
  }
  // Mixed precision: the gathered working weights are the rounded shard.
  auto one = mesh(2, 1, 1);
  one.precision = Precision::bf16;
  one.zero = 1;
  one.bucket_bytes = 64;
  auto three = one;
  three.zero = 3;
  EXPECT_EQ(on_threads(2, c, three).params, on_threads(2, c, one).params) << "bf16";
}

// ZeRO-2 and 3 communicate in every pass, so a rank whose shard has fewer
// rows than the micro-batches (or none: the last batch of 2 samples over 4
// ranks) runs the missing passes idle, taking part in their collectives.
// Oracle: single-rank training (1e-5).
TEST(Mesh, Zero2And3WithShardsShorterThanTheMicroBatches) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  DpConfig c;
  c.batch = 6;
  c.samples = 20;  // batches of 6, 6, 6 and 2 samples
  const auto single = test::train_single(c);
  for (int zero : {2, 3}) {
    auto o = mesh(4, 1, 1);
    o.zero = zero;
    o.bucket_bytes = 64;
    o.micro_batches = 2;  // shards of 2, 2, 1 and 1 rows, then 1, 1, 0 and 0
    EXPECT_EQ(test::compare(on_threads(4, c, o), single, 1e-5), "") << "ZeRO-" << zero;
  }
}

// ZeRO-2 and 3 where gradients arrive before their own layers run backward
// (and parameters are used by a later layer): a GPT's tied head (the
// embedding's unit is pinned), a dp2 x pp2 mesh whose stages sum the tied
// weight's gradients, and dp2 x tp2. Oracle: single-rank training (1e-5).
TEST(Gpt, Zero2And3WithTiedWeightsPipelinesAndTensorParallelismMatchSingleRank) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  const DpConfig c = test::gpt_config(true);
  const auto single = test::train_single(c);
  const std::array<std::array<int, 3>, 3> meshes{{{2, 1, 1}, {2, 2, 1}, {2, 1, 2}}};
  for (int zero : {2, 3})
    for (const auto& [dp, pp, tp] : meshes) {
      auto o = mesh(dp, pp, tp);
      o.zero = zero;
      o.bucket_bytes = 4096;  // several units per stage
      if (pp > 1) o.micro_batches = 2;
      EXPECT_EQ(test::compare(on_threads(dp * pp * tp, c, o), single, 1e-5), "")
          << "dp" << dp << " x pp" << pp << " x tp" << tp << " ZeRO-" << zero;
    }
  // ZeRO-3 with per-block recomputation (a block's forward again in its backward).
  DpConfig r = c;
  r.recompute = true;
  auto o = mesh(2, 1, 1);
  o.zero = 3;
  o.bucket_bytes = 4096;
  EXPECT_EQ(test::compare(on_threads(2, r, o), single, 1e-5), "") << "ZeRO-3 with recomputation";
}

// Units end inside blocks (they are runs of parameter pieces, the leaf
// layers: layers/param_pieces.hpp), so that ZeRO-2 and 3 hold buffers of a
// layer, not of a block. A GPT with units of about 64 values (each block's
// attention, its MLP's two Linears and its LayerNorms joining a neighbour,
// some across two blocks), per-block recomputation (whose second forward
// gathers the block's units again) and 4 ranks whose 11 samples in 3
// micro-batches leave one rank a pass without rows (it replays the passes'
// collectives). Oracles: the units, worked out from the sizes; single-rank
// training (1e-5).
TEST(Gpt, Zero2And3UnitsInsideBlocksWithRecomputationMatchSingleRank) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  DpConfig c = test::gpt_config(true);
  const auto single = test::train_single(c);
  c.recompute = true;
  auto o = mesh(4, 1, 1);
  o.bucket_bytes = 64 * sizeof(float);
  o.micro_batches = 3;
  const Sequential<float> m = build_model<float>(test::model_of(c), 1);
  const ShardMap map = shard_units(m, o, 4, tied_pieces(m, {}));
  std::size_t inside = 0, across = 0;
  for (const ShardUnit& u : map.units()) {
    if (u.size() == 0) continue;
    const std::size_t first = m.layer_of(u.first), last = m.layer_of(u.last - 1);
    if (m.param_offset(first) != u.first) ++inside;  // begins inside a layer
    if (last != first) ++across;
  }
  EXPECT_GE(inside, 6u) << map.units().size() << " units";  // 3 or more per block
  EXPECT_GE(across, 1u);
  // ZeRO-3's units hold at most the largest untied piece (the attention's
  // input projection, 8 x 24 = 192 values without bias), where that is less
  // than the bucket.
  GradSyncOptions big;
  big.bucket_bytes = 1 << 20;
  const ShardMap layers = shard_units(m, big, 4, tied_pieces(m, {}), true);
  for (const ShardUnit& u : layers.units())
    EXPECT_LE(u.size(), 192u) << "unit of pieces [" << u.first_piece << ", " << u.last_piece << ")";
  for (int zero : {2, 3}) {
    o.zero = zero;
    EXPECT_EQ(test::compare(on_threads(4, c, o), single, 1e-5), "") << "ZeRO-" << zero;
  }
}

// Units are runs of whole layers closed from the last layer once they hold
// the unit size; a rank's pieces and the shard round trip. Oracle: the
// layout worked by hand.
TEST(ShardMap, UnitsOfWholePiecesAndShardPiecesThatCoverTheBufferOnce) {
  // Pieces of 5, 0, 4 and 11 values; units of at least 4; 3 ranks.
  const ShardMap m({0, 5, 5, 9, 20}, 4, 3);
  ASSERT_EQ(m.units().size(), 3u);
  EXPECT_EQ(m.units()[0].first, 0u);
  EXPECT_EQ(m.units()[0].last, 5u);
  EXPECT_EQ(m.units()[0].first_piece, 0u);
  EXPECT_EQ(m.units()[0].last_piece, 2u);  // the empty piece 1 joins it
  EXPECT_EQ(m.units()[1].first, 5u);
  EXPECT_EQ(m.units()[1].last, 9u);
  EXPECT_EQ(m.units()[2].first, 9u);
  EXPECT_EQ(m.units()[2].last, 20u);
  // Slices ceil(5/3) = 2, ceil(4/3) = 2, ceil(11/3) = 4.
  EXPECT_EQ(m.shard_size(), 8u);
  EXPECT_EQ(m.uneven_padded(), 6u + 6u + 12u);
  const std::vector<ShardPiece> p2 = m.pieces(2);  // [4, 5) [9, 9) none, [17, 20)
  ASSERT_EQ(p2.size(), 2u);
  EXPECT_EQ(p2[0].flat, 4u);
  EXPECT_EQ(p2[0].count, 1u);
  EXPECT_EQ(p2[0].shard, 0u);
  EXPECT_EQ(p2[1].flat, 17u);
  EXPECT_EQ(p2[1].count, 3u);
  EXPECT_EQ(p2[1].shard, 4u);
  std::vector<int> covered(20, 0);
  for (int r = 0; r < 3; ++r)
    for (const ShardPiece& p : m.pieces(r))
      for (std::size_t i = 0; i < p.count; ++i) ++covered[p.flat + i];
  EXPECT_EQ(covered, std::vector<int>(20, 1));
  std::vector<double> flat(20);
  for (std::size_t i = 0; i < flat.size(); ++i) flat[i] = static_cast<double>(i) + 0.5;
  std::vector<double> all;
  for (int r = 0; r < 3; ++r) {
    const auto s = m.to_shard(flat, r);
    all.insert(all.end(), s.begin(), s.end());
  }
  EXPECT_EQ(m.to_flat(all), flat);
  EXPECT_EQ(m.to_shard(flat, 2)[3], 0.0);  // padding
  // No unit size: one unit for everything.
  EXPECT_EQ(ShardMap({0, 5, 5, 9, 20}, 0, 3).units().size(), 1u);
  // A tied layer is a unit alone: layers 0 and 2 of layers of 5, 0, 4, 11
  // with no unit size give [0, 1) [1, 3) [3, 4): the empty layer joins the
  // tied one above it.
  const ShardMap t({0, 5, 5, 9, 20}, 0, 3, {true, false, true, false});
  ASSERT_EQ(t.units().size(), 3u);
  EXPECT_EQ(t.units()[0].last_piece, 1u);
  EXPECT_EQ(t.units()[1].first_piece, 1u);
  EXPECT_EQ(t.units()[1].last_piece, 3u);
  EXPECT_EQ(t.units()[1].first, 5u);
  EXPECT_EQ(t.units()[1].last, 9u);
  EXPECT_EQ(t.units()[2].first, 9u);
  // Units of at least 6 close once they reach it: [0, 3) (9 values) and
  // [3, 4); of at most 6 (ZeRO-3's layer units), before the piece that would
  // take them past it: [0, 1) [1, 3) [3, 4), the piece of 11 alone.
  const auto ends = [](const ShardMap& map) {
    std::vector<std::size_t> e;
    for (const ShardUnit& u : map.units()) e.push_back(u.last_piece);
    return e;
  };
  EXPECT_EQ(ends(ShardMap({0, 5, 5, 9, 20}, 6, 3)), (std::vector<std::size_t>{3, 4}));
  EXPECT_EQ(ends(ShardMap({0, 5, 5, 9, 20}, 6, 3, {}, true)), (std::vector<std::size_t>{1, 3, 4}));
}

TEST(Mesh, GroupsFollowTheDocumentedLayout) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  run_ranks(4, 1, [&](Context&, comm::Communicator& world) {
    Mesh m(world, {2, 1, 2});
    const int w = world.rank();
    EXPECT_EQ(m.tp_rank(), w % 2);
    EXPECT_EQ(m.dp_rank(), w / 2);
    EXPECT_EQ(m.tp().size(), 2);
    EXPECT_EQ(m.dp().size(), 2);
    EXPECT_EQ(m.pp().size(), 1);
    // The tensor group of rank w holds w and its neighbour.
    const int sum = m.tp().allreduce_value(w);
    EXPECT_EQ(sum, (w / 2) * 4 + 1);
  });
}

// A run's state saved on one mesh continues on another: 10 steps as a
// 2-stage pipeline, then 10 steps on dp2 x tp2 with ZeRO-1, equal 20 steps of
// single-rank training (the optimizer state moves between layouts too).
TEST(Mesh, StateMovesBetweenMeshesInSingleRankLayout) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  DpConfig c;
  c.steps = 10;
  test::FullState half;
  auto pipeline = mesh(1, 2, 1);
  pipeline.micro_batches = 2;
  run_ranks(2, 1, [&](Context& ctx, comm::Communicator& comm) {
    test::FullState mine;
    test::train_model_parallel(ctx, comm, c, pipeline, nullptr, nullptr, nullptr, &mine);
    if (comm.rank() == 0) half = mine;
  });
  ASSERT_FALSE(half.opt1.empty());
  c.steps = 20;
  auto hybrid = mesh(2, 1, 2);
  hybrid.zero = 1;
  RunResult second;
  run_ranks(4, 1, [&](Context& ctx, comm::Communicator& comm) {
    auto r = test::train_model_parallel(ctx, comm, c, hybrid, nullptr, nullptr, &half);
    if (comm.rank() == 0) second = r;
  });
  const auto single = test::train_single(c);
  RunResult tail{{single.losses.begin() + 10, single.losses.end()}, single.params};
  EXPECT_EQ(test::compare(second, tail, 1e-5), "");
}

// ------------------------------------------------------------ mixed precision
// Single-rank mixed-precision training (DataParallel on one rank) with the
// same options: the reference of the model-parallel runs below.
RunResult single_mixed(const DpConfig& c, const MixedPrecisionOptions& m) {
  comm::SelfComm self;
  Context ctx;
  DataParallelOptions o;
  static_cast<MixedPrecisionOptions&>(o) = m;
  return test::train_dp(ctx, self, c, o);
}

ModelParallelOptions mixed_mesh(int dp, int pp, int tp, Precision p) {
  auto o = mesh(dp, pp, tp);
  o.precision = p;
  o.loss_scaling = p == Precision::fp16;
  return o;
}

// A pipeline with one micro-batch runs single-rank mixed-precision training's
// arithmetic (16-bit activations and inter-stage gradients, fp32 master
// weights, fused step, fp16 loss scaling): bitwise equal. Also with an fp16
// loss scale of 2^24, whose first steps overflow and are skipped: every
// stage must skip the same steps.
TEST(ModelParallelMixed, OneMicroBatchPipelineIsBitwiseSingleRankMixedPrecision) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  DpConfig c;
  for (Precision p : {Precision::bf16, Precision::fp16}) {
    auto o = mixed_mesh(1, 3, 1, p);
    o.micro_batches = 1;
    EXPECT_EQ(test::compare(on_threads(3, c, o), single_mixed(c, o), 0.0), "") << to_string(p);
  }
  auto o = mixed_mesh(1, 2, 1, Precision::fp16);
  o.micro_batches = 1;
  o.scaler.init_scale = o.scaler.max_scale = 16777216.0;
  const auto reference = single_mixed(c, o);
  // Keep the oracle honest: some steps were skipped, and not all.
  std::size_t skipped = 0;
  for (bool a : reference.applied) skipped += !a;
  EXPECT_GT(skipped, 0u);
  EXPECT_LT(skipped, c.steps);
  EXPECT_EQ(test::compare(on_threads(2, c, o), reference, 0.0), "");
}

// Every mesh kind against single-rank mixed precision: micro-batches,
// tensor shards and data-parallel sums add in another order, and a 16-bit
// rounding of a value that moved by one float ulp can move by a 16-bit ulp,
// so the runs need not agree bitwise. Tolerance 1e-4 relative (bf16's own
// distance to fp32 training is about 3e-2); measured over 20 Adam steps:
// losses bitwise equal, parameters within 1.3e-7 (printed).
TEST(ModelParallelMixed, MeshesMatchSingleRankMixedPrecision) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  DpConfig c;
  c.widths = {12, 16, 8, 8, 3};
  struct Case {
    const char* name;
    int dp, pp, tp;
    std::size_t micro;
    int zero;
  };
  for (const Case k : {Case{"pp3 1f1b x4", 1, 3, 1, 4, 0}, Case{"tp2", 1, 1, 2, 1, 0},
                       Case{"zero1 dp2", 2, 1, 1, 1, 1}, Case{"dp2 x pp2", 2, 2, 1, 2, 0},
                       Case{"pp2 x tp2", 1, 2, 2, 2, 0}}) {
    for (Precision p : {Precision::bf16, Precision::fp16}) {
      auto o = mixed_mesh(k.dp, k.pp, k.tp, p);
      o.micro_batches = k.micro;
      o.zero = k.zero;
      const auto single = single_mixed(c, o);
      const auto r = on_threads(k.dp * k.pp * k.tp, c, o);
      const auto [dl, dp] = test::deviation_of_largest(r, single);
      std::printf("%s %s: loss deviation %.2e, parameter deviation %.2e\n", k.name, to_string(p),
                  dl, dp);
      EXPECT_EQ(test::compare(r, single, 1e-4), "") << k.name << " " << to_string(p);
    }
  }
}

// The GPT in bf16 (activations, gradients between layers and GEMM inputs
// rounded to bf16, fp32 master weights) on 2 data-parallel ranks with ZeRO-1
// against single-rank bf16 training; tolerance as above.
TEST(ModelParallelMixed, GptInBf16MatchesSingleRankBf16) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  const DpConfig c = test::gpt_config(true);
  auto o = mixed_mesh(2, 1, 1, Precision::bf16);
  o.zero = 1;
  const auto single = single_mixed(c, o);
  const auto r = on_threads(2, c, o);
  const auto [dl, dp] = test::deviation_of_largest(r, single);
  std::printf("gpt bf16 zero1 dp2: loss deviation %.2e, parameter deviation %.2e\n", dl, dp);
  EXPECT_EQ(test::compare(r, single, 1e-4), "");
  // And bf16 trains the GPT as fp32 does, to bf16's distance (losses within 3e-2).
  const auto fp32 = test::train_single(c);
  for (std::size_t i = 0; i < fp32.losses.size(); ++i)
    EXPECT_NEAR(single.losses[i], fp32.losses[i], 3e-2 * fp32.losses[i]) << "step " << i + 1;
}

// Clipping by the global norm: every gradient of the whole model counted
// once, although stages, tensor shards, replicated parameters (the
// RowParallelLinear bias, the unpaired last Linear) and ZeRO-1 blocks spread
// them over ranks. With a norm bound that clips every step, fp32 runs stay
// within 1e-5 of single-rank clipped training (counting a replica twice
// changes the coefficient by far more).
TEST(ModelParallelMixed, ClippingUsesTheWholeModelsNorm) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  DpConfig c;  // 12-16-8-3: with tp 2 the last Linear stays whole, replicated
  c.optimizer = {OptimizerKind::sgd, 0.1};
  MixedPrecisionOptions clip;
  clip.clip_grad_norm = 0.05;
  const auto single = single_mixed(c, clip);
  const auto unclipped = test::train_single(c);
  EXPECT_NE(test::compare(single, unclipped, 1e-3), "") << "the bound must clip";
  for (auto shape : {MeshShape{1, 2, 2}, MeshShape{2, 1, 2}, MeshShape{2, 2, 1}}) {
    for (int zero : {0, 1}) {
      if (zero && shape.dp == 1) continue;
      auto o = mesh(shape.dp, shape.pp, shape.tp);
      static_cast<MixedPrecisionOptions&>(o) = clip;
      o.zero = zero;
      o.micro_batches = 2;
      EXPECT_EQ(test::compare(on_threads(shape.size(), c, o), single, 1e-5), "")
          << shape.str() << (zero ? " ZeRO-1" : "");
    }
  }
}

// The fp32 master weights are in the memory report: the whole stage, or the
// rank's ZeRO-1 block of it.
TEST(ModelParallelMixed, MasterWeightsAreAccounted) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  DpConfig c;
  const std::size_t n = 12 * 16 + 16 + 16 * 8 + 8 + 8 * 3 + 3;
  std::vector<MemoryReport> memory;
  on_threads(2, c, mixed_mesh(2, 1, 1, Precision::bf16), &memory);
  for (const auto& m : memory) EXPECT_EQ(m.master, n * sizeof(float));
  auto z = mixed_mesh(2, 1, 1, Precision::bf16);
  z.zero = 1;
  on_threads(2, c, z, &memory);
  for (const auto& m : memory) EXPECT_EQ(m.master, (n + 1) / 2 * sizeof(float));
  on_threads(2, c, mesh(2, 1, 1), &memory);
  for (const auto& m : memory) EXPECT_EQ(m.master, 0u);
}


// Sharded checkpoints: the ranks' shares (ModelParallel::checkpoint_shard)
// cover the whole model exactly once and hold exactly the values that
// full_params and full_optimizer_state gather, on every kind of mesh (uneven
// ZeRO-1 blocks on 3 ranks, replicated biases of row-parallel layers).
TEST(Mesh, CheckpointShardsCoverTheModelExactlyOnce) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  DpConfig c;
  c.widths = {12, 16, 8, 8, 3};
  c.steps = 3;
  auto zero = [](ModelParallelOptions o) {
    o.zero = 1;
    return o;
  };
  // ZeRO-2 in units of layers: each rank's pieces are slices of every unit.
  auto zero2 = [](ModelParallelOptions o) {
    o.zero = 2;
    o.bucket_bytes = 64;
    return o;
  };
  auto zero3 = [&](ModelParallelOptions o) {
    o = zero2(o);
    o.zero = 3;
    return o;
  };
  // Mixed precision: shards hold the fp32 master weights, as full_params does.
  auto bf16 = [](ModelParallelOptions o) {
    o.precision = Precision::bf16;
    return o;
  };
  for (const ModelParallelOptions& o :
       {mesh(1, 2, 1), mesh(1, 1, 2), mesh(2, 1, 1), zero(mesh(2, 1, 1)), zero(mesh(3, 1, 1)),
        zero(mesh(2, 1, 2)), zero2(mesh(3, 1, 1)), mesh(1, 2, 2), mesh(2, 2, 1), bf16(mesh(1, 2, 1)),
        bf16(zero(mesh(3, 1, 1))), bf16(zero2(mesh(2, 1, 1))), zero3(mesh(3, 1, 1)),
        bf16(zero3(mesh(2, 1, 1))), zero3(mesh(2, 2, 1)), bf16(mesh(1, 2, 2))}) {
    SCOPED_TRACE(o.mesh.str() + " ZeRO-" + std::to_string(o.zero) + " " + to_string(o.precision));
    const int world = o.mesh.size();
    std::vector<ModelParallel<float>::CheckpointShard> shards(world);
    test::FullState whole;
    run_ranks(world, 1, [&](Context& ctx, comm::Communicator& comm) {
      test::FullState mine;
      test::train_model_parallel(ctx, comm, c, o, nullptr, nullptr, nullptr, &mine,
                                 &shards[comm.rank()]);
      if (comm.rank() == 0) whole = mine;
    });
    const std::size_t n = whole.params.size();
    ASSERT_GT(n, 0u);
    ASSERT_EQ(whole.opt0.size(), n);  // Adam keeps two buffers
    std::vector<int> seen(n, 0);
    std::size_t mismatches = 0;
    for (int r = 0; r < world; ++r) {
      const auto& sh = shards[r];
      ASSERT_EQ(sh.opt0.size(), sh.params.size());
      ASSERT_EQ(sh.opt1.size(), sh.params.size());
      std::size_t at = 0;
      for (const auto& [offset, length] : sh.ranges) {
        ASSERT_GT(length, 0u);
        ASSERT_LE(offset + length, n);
        for (std::size_t k = 0; k < length; ++k, ++at) {
          ++seen[offset + k];
          mismatches += sh.params[at] != whole.params[offset + k] ||
                        sh.opt0[at] != whole.opt0[offset + k] ||
                        sh.opt1[at] != whole.opt1[offset + k];
        }
      }
      EXPECT_EQ(at, sh.params.size()) << "rank " << r;
    }
    EXPECT_EQ(mismatches, 0u);
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), static_cast<std::ptrdiff_t>(n))
        << "values held by no rank: " << std::count(seen.begin(), seen.end(), 0);
  }
}

// ------------------------------------------------------------- memory budget
TEST(MemoryBudget, TooLargeForOneRankTrainsWithPipelineOrTensorParallelism) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  DpConfig c;
  c.widths = {12, 256, 256, 256, 3};
  c.steps = 5;
  // SGD: Adam's first steps turn the rounding differences of tiny gradients
  // (wide layers summed by differently threaded GEMMs) into differences of
  // order lr; this test is about the budget.
  c.optimizer = {OptimizerKind::sgd, 0.05, 0.9};
  comm::SelfComm self;
  Context ctx;
  auto total_for = [&](comm::Communicator& world, const ModelParallelOptions& o) {
    ModelParallel<float> mp(ctx, world, mlp_model({c.widths}), Init::kaiming_uniform, 1,
                            LossKind::cross_entropy, c.optimizer, c.batch, o);
    return mp.memory().total();
  };
  const std::size_t single = total_for(self, mesh(1, 1, 1));
  ModelParallelOptions o = mesh(1, 1, 1);
  o.memory_budget = single * 3 / 4;
  try {
    total_for(self, o);
    ADD_FAILURE() << "a model over the budget was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config);
    EXPECT_NE(e.message().find("memory budget"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("--pp or --tp"), std::string::npos) << e.message();
  }
  for (auto shape : {MeshShape{1, 2, 1}, MeshShape{1, 1, 2}}) {
    auto m = mesh(shape.dp, shape.pp, shape.tp);
    m.memory_budget = o.memory_budget;
    EXPECT_EQ(test::compare(on_threads(2, c, m), test::train_single(c), 1e-5), "")
        << shape.str();
  }
}

// ------------------------------------------------------ impossible configurations
std::string error_of(int world_size, const DpConfig& c, const ModelParallelOptions& o) {
  std::string message;
  std::mutex mutex;
  try {
    run_ranks(world_size, 1, [&](Context& ctx, comm::Communicator& comm) {
      try {
        ModelParallel<float> mp(ctx, comm, test::model_of(c), Init::kaiming_uniform, 1,
                                LossKind::cross_entropy, c.optimizer, c.batch, o);
      } catch (const Error& e) {
        std::lock_guard<std::mutex> lock(mutex);
        message = e.message();
        EXPECT_EQ(e.kind(), ErrorKind::config) << e.message();
      }
    });
  } catch (const Error& e) {
    message = e.message();
  }
  return message;
}

TEST(ModelParallelErrors, MoreStagesThanLayers) {
  DpConfig c;
  c.widths = {12, 3};  // one layer
  EXPECT_NE(error_of(2, c, mesh(1, 2, 1)).find("2 stages for a model of 1 layers"),
            std::string::npos);
}

TEST(ModelParallelErrors, TensorParallelismMustDivideTheWidth) {
  DpConfig c;
  c.widths = {12, 15, 8, 3};
  const auto m = error_of(2, c, mesh(1, 1, 2));
  EXPECT_NE(m.find("--tp 2 does not divide the output width 15"), std::string::npos) << m;
}

// A GPT under --tp: the heads must divide, and the error names the layer by
// its path in the model.
TEST(ModelParallelErrors, TensorParallelismMustDivideTheHeads) {
  const auto m = error_of(4, test::gpt_config(false, 2, 12), mesh(1, 1, 4));
  EXPECT_NE(m.find("--tp 4 does not divide the number of heads 2 of h.0.0.1.core"),
            std::string::npos) << m;
}

TEST(ModelParallelErrors, MeshMustCoverTheWorld) {
  DpConfig c;
  const auto m = error_of(2, c, mesh(2, 2, 1));
  EXPECT_NE(m.find("mesh dp 2 x pp 2 x tp 1 has 4 ranks but the world has 2"), std::string::npos)
      << m;
}

TEST(ModelParallelErrors, CutsInsideATensorParallelPairOrOutOfOrder) {
  DpConfig c;
  auto o = mesh(1, 2, 2);
  o.cuts = {1};  // between the column-parallel layer and its activation
  auto m = error_of(4, c, o);
  EXPECT_NE(m.find("split by tensor parallelism"), std::string::npos) << m;
  o = mesh(1, 3, 1);
  o.cuts = {3, 2};
  m = error_of(3, c, o);
  EXPECT_NE(m.find("cut points must increase"), std::string::npos) << m;
}

}  // namespace
}  // namespace strata
