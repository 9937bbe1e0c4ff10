// DataParallel on thread ranks 1-4 against single-rank training on the same
// global batch: equivalence (losses and every parameter within 1e-5 of its
// own magnitude after 20 fp32 steps; the MLP and a residual model file),
// determinism, bucket sizes, gradient accumulation and uneven
// shards.
#include "backends/ranks.hpp"
#include "backends/comm/self.hpp"
#include "dp_harness.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

namespace strata {
namespace {

test::RunResult dp_on_threads(int ranks, const test::DpConfig& c, DataParallelOptions o = {}) {
  test::RunResult result;
  run_ranks(ranks, 1, [&](Context& ctx, comm::Communicator& comm) {
    auto r = test::train_dp(ctx, comm, c, o);
    if (comm.rank() == 0) result = r;
    // Every rank ends with the same parameters.
    auto mine = r.params;
    auto first = mine;
    comm.broadcast(first.data(), first.size(), comm::DataType::f32, 0);
    EXPECT_EQ(mine, first) << "rank " << comm.rank() << " diverged from rank 0";
  });
  return result;
}

class DataParallelThreads : public ::testing::TestWithParam<int> {};

TEST_P(DataParallelThreads, MatchesSingleRankTraining) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  test::DpConfig c;
  const auto single = test::train_single(c);
  EXPECT_EQ(test::compare(dp_on_threads(GetParam(), c), single, 1e-5), "");
}

TEST_P(DataParallelThreads, UnevenShardsMatchSingleRank) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  test::DpConfig c;
  c.batch = 11;  // 60 samples: shards differ in size, the last batch has 5 samples
  c.optimizer = {OptimizerKind::sgd, 0.05, 0.9};
  EXPECT_EQ(test::compare(dp_on_threads(GetParam(), c), test::train_single(c), 1e-5), "");
}

TEST_P(DataParallelThreads, AccumulationEqualsOneLargerBatch) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  test::DpConfig c;
  c.micro = 3;
  c.batch = 10;  // three micro-batches of 10 = one step on 30
  EXPECT_EQ(test::compare(dp_on_threads(GetParam(), c), test::train_single(c), 1e-5), "");
}

TEST_P(DataParallelThreads, DropoutMasksMatchSingleRank) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  // Masks are indexed by the row's place in the global batch, so shards drop
  // exactly what single-rank training drops.
  test::DpConfig c;
  c.dropout = 0.3;
  EXPECT_EQ(test::compare(dp_on_threads(GetParam(), c), test::train_single(c), 1e-5), "");
}

TEST_P(DataParallelThreads, ResidualModelFileMatchesSingleRank) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  test::DpConfig c;
  c.model = test::residual_model();
  EXPECT_EQ(test::compare(dp_on_threads(GetParam(), c), test::train_single(c), 1e-5), "");
  // Dropout inside the blocks: masks by global row, as at the top level.
  c.model = test::residual_model(true);
  c.batch = 11;  // uneven shards
  EXPECT_EQ(test::compare(dp_on_threads(GetParam(), c), test::train_single(c), 1e-5), "");
}

// SyncBatchNorm: each BatchNorm normalises with the statistics of the whole
// global batch, so data parallelism equals single-rank training, uneven
// shards (11 = 3 + 3 + 3 + 2) included; the running statistics too (they are
// checked through evaluation-mode forwards in CnnModel tests; here through
// the parameters they do not touch, and the losses).
TEST_P(DataParallelThreads, SyncBatchNormMatchesSingleRank) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  test::DpConfig c;
  c.features = 72;
  c.model = test::batchnorm_cnn_model(true);
  c.batch = 11;
  c.steps = 12;
  const auto single = test::train_single(c);
  EXPECT_EQ(test::compare(dp_on_threads(GetParam(), c), single, 1e-5), "");
  if (GetParam() > 1) {
    // Without it each rank normalises its own shard: not the same training
    // (3 steps: the epoch's last batch of 5 leaves 4 ranks single samples).
    c.model = test::batchnorm_cnn_model(false);
    c.steps = 3;
    EXPECT_NE(test::compare(dp_on_threads(GetParam(), c), single, 1e-5), "");
  }
}

// Per-position labels (one per token): the loss and its gradient per
// position, shards of whole samples.
TEST_P(DataParallelThreads, PerPositionLabelsMatchSingleRank) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  test::DpConfig c;
  c.model = test::per_position_model();
  c.classes = 5;
  c.label_width = 3;
  c.batch = 11;
  EXPECT_EQ(test::compare(dp_on_threads(GetParam(), c), test::train_single(c), 1e-5), "");
}

// A GPT with dropout and a head tied to the token embedding: shards of
// whole token windows, attention within each sample.
TEST_P(DataParallelThreads, GptWithDropoutMatchesSingleRank) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  const test::DpConfig c = test::gpt_config(true);
  EXPECT_EQ(test::compare(dp_on_threads(GetParam(), c), test::train_single(c), 1e-5), "");
}

INSTANTIATE_TEST_SUITE_P(Ranks, DataParallelThreads, ::testing::Values(1, 2, 3, 4));

TEST(DataParallelThreads3, RunsAreBitwiseIdentical) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  test::DpConfig c;
  const auto a = dp_on_threads(3, c), b = dp_on_threads(3, c);
  EXPECT_EQ(a.params, b.params);
  EXPECT_EQ(a.losses, b.losses);
}

TEST(DataParallelThreads3, BucketSizesDoNotChangeResults) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  test::DpConfig c;
  c.widths = {12, 64, 64, 3};  // 5,187 parameters: 1 KiB buckets make 21 of them
  DataParallelOptions tiny, big, one, late;
  tiny.bucket_bytes = 1024;
  big.bucket_bytes = std::size_t(25) << 20;
  one.bucket_bytes = 0;
  late.overlap = false;
  const auto a = dp_on_threads(3, c, tiny);
  EXPECT_EQ(a.params, dp_on_threads(3, c, big).params);
  EXPECT_EQ(a.params, dp_on_threads(3, c, one).params);
  EXPECT_EQ(a.params, dp_on_threads(3, c, late).params);
}

TEST(DataParallelThreads4, LastBatchSmallerThanTheRankCount) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  test::DpConfig c;
  c.samples = 23;
  c.batch = 10;  // batches of 10, 10, 3: with 4 ranks one shard is empty
  c.steps = 9;
  EXPECT_EQ(test::compare(dp_on_threads(4, c), test::train_single(c), 1e-5), "");
}

// Gradient compression: buckets travel in 16 bits and are summed in float
// (rounded once); fp16 buckets carry loss-scaled gradients (scale 1024; fp16
// without loss scaling is refused: small gradients would vanish). Against
// uncompressed single-rank training over 20 Adam steps the losses stay
// within 0.2% and the parameters within 0.5% of the largest parameter
// (measured on 2-4 ranks: bf16 at most 2.5e-4 and 6.7e-4, fp16 2.2e-5 and
// 4.8e-5; printed); the allreduce payload is half.
TEST_P(DataParallelThreads, CompressedGradientsStayCloseToUncompressed) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  test::DpConfig c;
  const auto single = test::train_single(c);
  DataParallelOptions plain;
  plain.bucket_bytes = 256;  // several buckets
  const auto full = dp_on_threads(GetParam(), c, plain);
  for (GradCompression g : {GradCompression::bf16, GradCompression::fp16}) {
    DataParallelOptions o = plain;
    o.compression = g;
    // A scale that lifts the gradients (about 1e-3 here) well into fp16
    // without overflowing their sums: no step is skipped, so the runs differ
    // by compression alone (the default 2^16 skips the first steps).
    o.loss_scaling = g == GradCompression::fp16;
    o.scaler.init_scale = 1024;
    const auto r = dp_on_threads(GetParam(), c, o);
    const auto [dl, dp] = test::deviation_of_largest(r, single);
    std::printf("compression %s on %d ranks: loss deviation %.2e, parameter deviation %.2e\n",
                to_string(g), GetParam(), dl, dp);
    EXPECT_LT(dl, 2e-3) << to_string(g);
    EXPECT_LT(dp, 5e-3) << to_string(g);
    if (GetParam() > 1) EXPECT_EQ(r.comm_bytes * 2, full.comm_bytes) << to_string(g);
  }
}

// Mixed-precision training (16-bit activation storage and working weights,
// fp32 master weights) against fp32 single-rank training: 20 Adam steps of
// the small MLP. Measured (the same on 1-4 ranks; printed): bf16 4.59e-3 in
// loss and 2.75e-2 in parameters (relative to the largest), fp16 with
// dynamic loss scaling 2.77e-4 and 2.43e-4. The bounds are twice that: other
// BLAS kernels and summation orders round differently, but not by more than
// the 16-bit rounding itself. Clipping by a large norm changes nothing.
TEST_P(DataParallelThreads, MixedPrecisionTrainingStaysCloseToFp32) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  test::DpConfig c;
  const auto single = test::train_single(c);
  for (Precision p : {Precision::bf16, Precision::fp16}) {
    DataParallelOptions o;
    o.precision = p;
    o.loss_scaling = p == Precision::fp16;
    o.clip_grad_norm = 1e6;
    const auto r = dp_on_threads(GetParam(), c, o);
    const auto [dl, dp] = test::deviation_of_largest(r, single);
    std::printf("%s on %d ranks: loss deviation %.2e, parameter deviation %.2e\n", to_string(p),
                GetParam(), dl, dp);
    const bool bf = p == Precision::bf16;
    EXPECT_LT(dl, bf ? 9.2e-3 : 5.6e-4) << to_string(p);
    EXPECT_LT(dp, bf ? 5.5e-2 : 4.9e-4) << to_string(p);
    EXPECT_GT(dl, 0.0) << "16-bit storage must change the numbers";
  }
}

// Real 16-bit activation storage against the emulated storage (float buffers
// holding the rounded values), through the whole mixed-precision step
// (master weights, fused step, fp16 loss scaling), with dropout and two
// micro-batches of gradient accumulation: bitwise the same losses and
// parameters on every rank count.
TEST_P(DataParallelThreads, Storage16IsBitwiseTheSameAsEmulatedStorage) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  test::DpConfig c;
  c.dropout = 0.2;
  c.micro = 2;
  c.steps = 10;
  for (Precision p : {Precision::bf16, Precision::fp16}) {
    DataParallelOptions o;
    o.precision = p;
    o.loss_scaling = p == Precision::fp16;
    o.emulate_storage = true;
    const auto emulated = dp_on_threads(GetParam(), c, o);
    o.emulate_storage = false;
    const auto real = dp_on_threads(GetParam(), c, o);
    EXPECT_EQ(real.params, emulated.params) << to_string(p);
    EXPECT_EQ(real.losses, emulated.losses) << to_string(p);
  }
  // The CNN with SyncBatchNorm in bf16: convolutions, pooling and the
  // synchronised statistics on 16-bit activations, and the losses near fp32's
  // (bf16 keeps 8 bits: 2^-8 relative per rounding; 5e-2 over 12 steps).
  c = test::DpConfig{};
  c.features = 72;
  c.model = test::batchnorm_cnn_model(true);
  c.batch = 12;
  c.steps = 12;
  const auto fp32 = dp_on_threads(GetParam(), c);
  DataParallelOptions o;
  o.precision = Precision::bf16;
  o.emulate_storage = true;
  const auto emulated = dp_on_threads(GetParam(), c, o);
  o.emulate_storage = false;
  const auto real = dp_on_threads(GetParam(), c, o);
  EXPECT_EQ(real.params, emulated.params) << "CNN bf16";
  EXPECT_EQ(real.losses, emulated.losses) << "CNN bf16";
  for (std::size_t i = 0; i < real.losses.size(); ++i)
    EXPECT_NEAR(real.losses[i], fp32.losses[i], 5e-2 * std::fabs(fp32.losses[i])) << "step " << i + 1;
}

// fp16 with too large a loss scale: the first steps overflow and are
// skipped (parameters untouched) while the scale backs off; training then
// proceeds and the loss falls.
TEST(DataParallelMixed, LossScalerSkipsOverflowingStepsThenTrains) {
  test::DpConfig c;
  c.steps = 30;
  Context ctx;
  auto d = test::dp_data(c);
  auto model = make_mlp<float>({c.widths, ActivationKind::relu, 0.0, c.seed});
  BuildOptions build;
  build.max_batch = c.batch;
  build.numerics.storage = Precision::fp16;
  model.build(build);
  model.init(Init::kaiming_uniform, c.seed);
  SoftmaxCrossEntropy<float> loss;
  Optimizer<float> opt(c.optimizer, model.num_params());
  comm::SelfComm self;
  DataParallelOptions o;
  o.precision = Precision::fp16;
  o.loss_scaling = true;
  o.scaler.init_scale = o.scaler.max_scale = 16777216.0;  // 2^24: gradients overflow fp16
  o.scaler.growth_interval = 1000;
  DataParallel<float> dp(ctx, self, model, loss, opt, o);
  const auto before = test::to_host(dp.master_params());
  data::BatchLoader<float> loader(d, c.batch, true, c.seed);
  data::Batch<float> b;
  std::vector<double> losses;
  std::size_t skipped = 0;
  for (std::size_t s = 0, epoch = 0; s < c.steps;) {
    loader.seek(epoch++, 0);
    while (s < c.steps && loader.next(b)) {
      losses.push_back(dp.step(b, loader.global_size()));
      if (!dp.last_info().applied) {
        ++skipped;
        EXPECT_EQ(skipped, s + 1) << "skips come first";
        EXPECT_EQ(test::to_host(dp.master_params()), before) << "a skipped step changed the weights";
      }
      ++s;
    }
  }
  EXPECT_GE(skipped, 1u);
  EXPECT_EQ(dp.scaler()->state().skipped, static_cast<std::int64_t>(skipped));
  EXPECT_EQ(dp.scaler()->scale(), 16777216.0 / std::pow(2.0, double(skipped)));
  EXPECT_EQ(opt.steps(), static_cast<std::int64_t>(c.steps - skipped));
  EXPECT_LT(losses.back(), 0.8 * losses.front());
}

// The model's activation storage is chosen when it is built
// (BuildOptions::numerics); DataParallel with another precision is refused
// with both named, before any step.
TEST(DataParallelMixed, StorageOfTheBuiltModelMustMatchThePrecision) {
  Context ctx;
  auto model = make_mlp<float>({{12, 8, 3}});
  model.build(4);
  SoftmaxCrossEntropy<float> loss;
  Optimizer<float> opt({}, model.num_params());
  comm::SelfComm self;
  DataParallelOptions o;
  o.precision = Precision::bf16;
  try {
    DataParallel<float> dp(ctx, self, model, loss, opt, o);
    ADD_FAILURE() << "bf16 training of an fp32-built model was accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("bf16 training of a model built for fp32 storage"), std::string::npos)
        << e.message();
  }
}

TEST(DataParallel, BucketsCoverTheGradientsInBackwardOrder) {
  Context ctx;
  auto model = make_mlp<float>({{12, 64, 64, 3}});
  model.build(4);
  SoftmaxCrossEntropy<float> loss;
  Optimizer<float> opt({}, model.num_params());
  comm::SelfComm self;
  DataParallelOptions o;
  o.bucket_bytes = 4000;  // 1000 floats
  DataParallel<float> dp(ctx, self, model, loss, opt, o);
  const auto& b = dp.buckets();
  ASSERT_EQ(b.size(), (model.num_params() + 999) / 1000);
  EXPECT_EQ(b.front().second, model.num_params());
  EXPECT_EQ(b.back().first, 0u);
  for (std::size_t i = 1; i < b.size(); ++i) EXPECT_EQ(b[i].second, b[i - 1].first);
}

}  // namespace
}  // namespace strata
