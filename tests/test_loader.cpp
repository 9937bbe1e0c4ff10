// The batch loader: every sample exactly once per epoch across the shards of
// all ranks, shard sizes within one, the same order on every rank, seek()
// resumes exactly, and background prefetching returns what a fresh loader does.
#include "data/loader.hpp"
#include "test_utils.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace strata {
namespace {

// A data set whose feature is the sample's index, so batches reveal indices.
data::Dataset indexed(std::size_t n) {
  data::Dataset d;
  d.name = "indexed";
  d.features = 1;
  d.classes = 1;
  for (std::size_t i = 0; i < n; ++i) {
    d.x.push_back(static_cast<float>(i));
    d.labels.push_back(0);
  }
  return d;
}

std::vector<int> indices(const data::Batch<float>& b) {
  std::vector<int> out;
  for (float v : test::to_host(b.x)) out.push_back(static_cast<int>(v));
  return out;
}

TEST(BatchLoader, ShardsCoverEverySampleOncePerEpoch) {
  const auto d = indexed(103);
  for (int ranks : {1, 2, 3, 4}) {
    std::vector<int> seen;
    std::vector<std::unique_ptr<data::BatchLoader<float>>> loaders;
    for (int r = 0; r < ranks; ++r)
      loaders.push_back(std::make_unique<data::BatchLoader<float>>(d, 10, true, 5, false, r, ranks));
    for (std::size_t step = 0; step < loaders[0]->batches_per_epoch(); ++step) {
      std::size_t smallest = 1000, largest = 0;
      for (auto& l : loaders) {
        data::Batch<float> b;
        ASSERT_TRUE(l->next(b));
        auto ix = indices(b);
        seen.insert(seen.end(), ix.begin(), ix.end());
        smallest = std::min(smallest, ix.size());
        largest = std::max(largest, ix.size());
      }
      EXPECT_LE(largest - smallest, 1u);
    }
    std::sort(seen.begin(), seen.end());
    ASSERT_EQ(seen.size(), 103u) << ranks << " ranks";
    for (int i = 0; i < 103; ++i) EXPECT_EQ(seen[i], i);
  }
}

TEST(BatchLoader, EpochsShuffleDifferentlyAndSeekResumes) {
  const auto d = indexed(50);
  data::BatchLoader<float> a(d, 7, true, 9);
  std::vector<std::vector<int>> epoch0, epoch1;
  data::Batch<float> b;
  while (a.next(b)) epoch0.push_back(indices(b));
  a.seek(1, 0);
  while (a.next(b)) epoch1.push_back(indices(b));
  EXPECT_NE(epoch0, epoch1);
  // A fresh loader positioned at (1, 3) continues exactly there.
  data::BatchLoader<float> c(d, 7, true, 9);
  c.seek(1, 3);
  ASSERT_TRUE(c.next(b));
  EXPECT_EQ(indices(b), epoch1[3]);
  ASSERT_TRUE(c.next(b));
  EXPECT_EQ(indices(b), epoch1[4]);
}

TEST(BatchLoader, NoShuffleKeepsTheOrder) {
  const auto d = indexed(9);
  data::BatchLoader<float> a(d, 4, false, 1);
  data::Batch<float> b;
  ASSERT_TRUE(a.next(b));
  EXPECT_EQ(indices(b), (std::vector<int>{0, 1, 2, 3}));
  ASSERT_TRUE(a.next(b));
  ASSERT_TRUE(a.next(b));
  EXPECT_EQ(indices(b), (std::vector<int>{8}));
  EXPECT_FALSE(a.next(b));
}

}  // namespace
}  // namespace strata
