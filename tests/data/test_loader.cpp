// The batch loader: every sample exactly once per epoch across the shards of
// all ranks, shard sizes within one, the same order on every rank, seek()
// resumes exactly, and background prefetching returns what a fresh loader does.
// Augmentation (random crop with padding, horizontal flip) against a naive
// pad-crop-mirror of each image, and the same augmented samples for any
// number of ranks.
#include "backends/error.hpp"
#include "data/loader.hpp"
#include "test_utils.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <tuple>

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

// The permutations are a published function of (seed, epoch): the PyTorch
// peer of text training (benchmarks/peers/torch_lm.py) computes them again in
// Python, and these values come from that implementation.
TEST(BatchLoader, ShuffledOrderIsThePeersPermutation) {
  using V = std::vector<std::size_t>;
  EXPECT_EQ(data::shuffled_order(10, 42, 0), (V{2, 3, 7, 5, 8, 4, 0, 6, 9, 1}));
  EXPECT_EQ(data::shuffled_order(10, 42, 3), (V{3, 6, 2, 0, 1, 9, 8, 4, 5, 7}));
  const V big = data::shuffled_order(1000, 7, 1);
  EXPECT_EQ(V(big.begin(), big.begin() + 8), (V{603, 548, 817, 265, 284, 97, 52, 20}));
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


// Images of shape {c, h, w} whose pixel values encode (sample, pixel).
data::Dataset images(std::size_t n, std::size_t c, std::size_t h, std::size_t w) {
  data::Dataset d;
  d.name = "images";
  d.features = c * h * w;
  d.shape = {c, h, w};
  d.classes = 1;
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < d.features; ++j) d.x.push_back(static_cast<float>(i * 1000 + j + 1));
    d.labels.push_back(0);
  }
  return d;
}

// The naive oracle: pad the image by `pad` with `fill`, cut an h x w window
// at (pad + dy, pad + dx), mirror it when `mirror`.
std::vector<float> pad_crop_mirror(const float* x, std::size_t c, std::size_t h, std::size_t w,
                                   std::size_t pad, float fill, int dy, int dx, bool mirror) {
  const std::size_t ph = h + 2 * pad, pw = w + 2 * pad;
  std::vector<float> padded(c * ph * pw, fill);
  for (std::size_t k = 0; k < c; ++k)
    for (std::size_t i = 0; i < h; ++i)
      for (std::size_t j = 0; j < w; ++j) padded[(k * ph + i + pad) * pw + j + pad] = x[(k * h + i) * w + j];
  std::vector<float> out(c * h * w);
  for (std::size_t k = 0; k < c; ++k)
    for (std::size_t i = 0; i < h; ++i)
      for (std::size_t j = 0; j < w; ++j) {
        const std::size_t jj = mirror ? w - 1 - j : j;
        out[(k * h + i) * w + j] =
            padded[(k * ph + static_cast<std::size_t>(static_cast<int>(i + pad) + dy)) * pw +
                   static_cast<std::size_t>(static_cast<int>(jj + pad) + dx)];
      }
  return out;
}

TEST(Augment, EverySampleIsAPaddedCropOrItsMirror) {
  const std::size_t c = 2, h = 5, w = 4, pad = 2;
  const auto d = images(40, c, h, w);
  const data::Augment a{pad, true, -7.0f};
  a.check(d);
  std::set<std::tuple<int, int, bool>> variants;
  for (std::size_t s = 0; s < d.size(); ++s) {
    std::vector<float> got(d.features);
    a.apply(d.x.data() + s * d.features, got.data(), d.shape, 11, 3, s);
    // Exactly one of the (2 pad + 1)^2 x 2 transformations gives it.
    int matches = 0;
    for (int dy = -2; dy <= 2; ++dy)
      for (int dx = -2; dx <= 2; ++dx)
        for (bool m : {false, true})
          if (pad_crop_mirror(d.x.data() + s * d.features, c, h, w, pad, -7.0f, dy, dx, m) == got) {
            ++matches;
            variants.insert({dy, dx, m});
          }
    EXPECT_EQ(matches, 1) << "sample " << s;
  }
  // 40 samples draw many of the 50 variants (a stuck generator draws one).
  EXPECT_GE(variants.size(), 15u);
}

TEST(Augment, SamplesAreTheSameForAnyNumberOfRanksAndDifferPerEpoch) {
  const auto d = images(37, 1, 6, 6);
  const data::Augment a{1, true, 0.0f};
  auto epoch_of = [&](int ranks, std::size_t epoch) {
    std::vector<float> all;
    std::vector<std::unique_ptr<data::BatchLoader<float>>> loaders;
    for (int r = 0; r < ranks; ++r) {
      loaders.push_back(std::make_unique<data::BatchLoader<float>>(d, 8, true, 9, false, r, ranks));
      loaders.back()->set_augment(a);
      loaders.back()->seek(epoch, 0);
    }
    for (std::size_t step = 0; step < loaders[0]->batches_per_epoch(); ++step)
      for (auto& l : loaders) {
        data::Batch<float> b;
        EXPECT_TRUE(l->next(b));
        const auto x = test::to_host(b.x);
        all.insert(all.end(), x.begin(), x.end());
      }
    return all;
  };
  const auto one = epoch_of(1, 2);
  EXPECT_EQ(epoch_of(2, 2), one);
  EXPECT_EQ(epoch_of(3, 2), one);
  EXPECT_NE(epoch_of(1, 3), one);
}

// The message of the strata::Error that check() throws ("" when none).
std::string check_error(const data::Augment& a, const data::Dataset& d) {
  try {
    a.check(d);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config);
    return e.what();
  }
  return "";
}

TEST(Augment, NonImagesAndOversizedPaddingAreRefused) {
  EXPECT_NE(check_error({0, true, 0.0f}, indexed(4)).find("shape {1}"), std::string::npos);
  EXPECT_NE(check_error({3, false, 0.0f}, images(2, 1, 3, 3)).find("--random-crop 3 must be smaller"),
            std::string::npos);
  EXPECT_EQ(check_error({2, true, 0.0f}, images(2, 1, 3, 3)), "");
}

}  // namespace
}  // namespace strata
