// DataParallel on thread ranks 1-4 against single-rank training on the same
// global batch: equivalence (losses and parameters within 1e-5 relative after
// 20 fp32 steps), determinism, bucket sizes, gradient accumulation and uneven
// shards.
#include "backends/ranks.hpp"
#include "backends/comm/self.hpp"
#include "dp_harness.hpp"

#include <gtest/gtest.h>

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
  test::DpConfig c;
  const auto single = test::train_single(c);
  EXPECT_EQ(test::compare(dp_on_threads(GetParam(), c), single, 1e-5), "");
}

TEST_P(DataParallelThreads, UnevenShardsMatchSingleRank) {
  test::DpConfig c;
  c.batch = 11;  // 60 samples: shards differ in size, the last batch has 5 samples
  c.optimizer = {OptimizerKind::sgd, 0.05, 0.9};
  EXPECT_EQ(test::compare(dp_on_threads(GetParam(), c), test::train_single(c), 1e-5), "");
}

TEST_P(DataParallelThreads, AccumulationEqualsOneLargerBatch) {
  test::DpConfig c;
  c.micro = 3;
  c.batch = 10;  // three micro-batches of 10 = one step on 30
  EXPECT_EQ(test::compare(dp_on_threads(GetParam(), c), test::train_single(c), 1e-5), "");
}

TEST_P(DataParallelThreads, DropoutMasksMatchSingleRank) {
  // Masks are indexed by the row's place in the global batch, so shards drop
  // exactly what single-rank training drops.
  test::DpConfig c;
  c.dropout = 0.3;
  EXPECT_EQ(test::compare(dp_on_threads(GetParam(), c), test::train_single(c), 1e-5), "");
}

INSTANTIATE_TEST_SUITE_P(Ranks, DataParallelThreads, ::testing::Values(1, 2, 3, 4));

TEST(DataParallelThreads3, RunsAreBitwiseIdentical) {
  test::DpConfig c;
  const auto a = dp_on_threads(3, c), b = dp_on_threads(3, c);
  EXPECT_EQ(a.params, b.params);
  EXPECT_EQ(a.losses, b.losses);
}

TEST(DataParallelThreads3, BucketSizesDoNotChangeResults) {
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
  test::DpConfig c;
  c.samples = 23;
  c.batch = 10;  // batches of 10, 10, 3: with 4 ranks one shard is empty
  c.steps = 9;
  EXPECT_EQ(test::compare(dp_on_threads(4, c), test::train_single(c), 1e-5), "");
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
