// Checkpoint files (strategies/checkpoint.hpp): round trip, verification of
// every field a corrupt file can break, and the inputs that the fuzzer
// (tests/fuzz/fuzz_checkpoint.cpp) turned up.
#include "strategies/checkpoint.hpp"

#include "backends/comm/threads.hpp"
#include "backends/error.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using strata::Error;
using strata::ErrorKind;
namespace ck = strata::checkpoint;

namespace {

void expect_data_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no strata::Error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::data) << e.what();
    for (const std::string& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "message '" << e.what() << "' lacks '" << p << "'";
  }
}

ck::State sample_state() {
  ck::State s;
  s.config = R"({"layers":[3,2]})";
  s.state = R"({"step":7})";
  s.params = {1.0f, -2.5f, 3.25f, 0.0f, 1e-30f, -0.0f};
  s.opt0 = {0.5f, 0.25f};
  s.opt1 = {};
  return s;
}

class CheckpointFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("strata-test-ckpt-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string bytes_of(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  fs::path dir_;
};

void expect_same(const ck::State& a, const ck::State& b) {
  EXPECT_EQ(a.config, b.config);
  EXPECT_EQ(a.state, b.state);
  ASSERT_EQ(a.params.size(), b.params.size());
  EXPECT_EQ(0, std::memcmp(a.params.data(), b.params.data(), a.params.size() * sizeof(float)));
  EXPECT_EQ(a.opt0, b.opt0);
  EXPECT_EQ(a.opt1, b.opt1);
}

}  // namespace

TEST_F(CheckpointFiles, RoundTripsFromFileAndMemory) {
  const ck::State s = sample_state();
  const std::string file = ck::save(dir_.string(), 7, s, 2);
  EXPECT_EQ(fs::path(file).filename(), "ckpt-000000007.strata");
  EXPECT_EQ(ck::latest(dir_.string()), file);
  expect_same(ck::load(file), s);
  const std::string bytes = bytes_of(file);
  expect_same(ck::parse(bytes.data(), bytes.size(), "mem"), s);
}

TEST_F(CheckpointFiles, KeepsTheNewestAndRemovesStaleTemporaryFiles) {
  const ck::State s = sample_state();
  fs::create_directories(dir_);
  // Left behind by a process killed while writing step 3.
  std::ofstream(dir_ / "ckpt-000000003.strata.tmp") << "partial";
  for (int step : {1, 2, 3, 4}) ck::save(dir_.string(), step, s, 2);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"ckpt-000000003.strata", "ckpt-000000004.strata", "latest"}));
}

TEST_F(CheckpointFiles, EveryTruncationIsRefusedNamingTheFile) {
  const std::string file = ck::save(dir_.string(), 1, sample_state(), 1);
  const std::string bytes = bytes_of(file);
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    SCOPED_TRACE(n);
    expect_data_error([&] { ck::parse(bytes.data(), n, "cut.strata"); }, {"cut.strata"});
  }
}

TEST_F(CheckpointFiles, EveryFlippedBitIsRefused) {
  const std::string file = ck::save(dir_.string(), 1, sample_state(), 1);
  const std::string good = bytes_of(file);
  for (std::size_t i = 0; i < good.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      bool refused = false;
      try {
        ck::parse(bad.data(), bad.size(), "flip.strata");
      } catch (const Error& e) {
        refused = e.kind() == ErrorKind::data;
      }
      EXPECT_TRUE(refused) << "byte " << i << " bit " << bit;
    }
  }
}

// Found by EveryFlippedBitIsRefused: a flipped bit in a section's name made
// the reader skip that section as one of a newer version, and the file loaded
// without its parameters (strata-train then blamed the configuration).
TEST_F(CheckpointFiles, ADamagedSectionNameIsCorruption) {
  const std::string file = ck::save(dir_.string(), 1, sample_state(), 1);
  std::string bytes = bytes_of(file);
  const auto at = bytes.find("params");
  ASSERT_NE(at, std::string::npos);
  bytes[at] = 'q';
  expect_data_error([&] { ck::parse(bytes.data(), bytes.size(), "name.strata"); },
                    {"name.strata", "section 'params' is missing"});
  bytes = bytes_of(file);
  bytes[bytes.find("opt0") + 3] = '1';  // two opt1 sections
  expect_data_error([&] { ck::parse(bytes.data(), bytes.size(), "twice.strata"); },
                    {"twice.strata", "section 'opt1' appears twice"});
}

TEST_F(CheckpointFiles, MissingFileAndMissingLatest) {
  expect_data_error([&] { ck::load((dir_ / "nothing.strata").string()); }, {"nothing.strata", "cannot open"});
  expect_data_error([&] { ck::latest(dir_.string()); }, {"no checkpoint to resume from"});
}

// A section size near 2^64 wrapped the bounds check
// (offset + size overflowed) and the reader ran past the buffer.
TEST(CheckpointParse, HugeSectionSizeIsTruncationNotAnOverread) {
  std::string b = "STRATACK";
  auto put = [&](const void* p, std::size_t n) { b.append(static_cast<const char*>(p), n); };
  const std::uint32_t version = 1, count = 1, len = 6;
  const std::uint64_t size = ~std::uint64_t{0} - 10;
  const std::uint32_t crc = 0;
  put(&version, 4);
  put(&count, 4);
  put(&len, 4);
  put("params", 6);
  put(&size, 8);
  put(&crc, 4);
  b += "abcd";
  expect_data_error([&] { ck::parse(b.data(), b.size(), "huge.strata"); },
                    {"huge.strata", "truncated", "section 'params'"});
}

// ------------------------------------------------------- sharded checkpoints
namespace {

constexpr std::uint64_t kValues = 40;

// Rank r of `ranks` holds blocks of 5 values, block b going to rank b % ranks
// (several ranges per rank, out of order with the other ranks'). `skip`: a
// block nobody writes; `twice`: a block rank 1 writes too.
ck::Shard part(int r, int ranks, bool opt = true, int skip = -1, int twice = -1) {
  ck::Shard s;
  for (std::uint64_t b = 0; b < kValues / 5; ++b) {
    const bool mine = static_cast<int>(b % ranks) == r && static_cast<int>(b) != skip;
    if (!mine && !(r == 1 && static_cast<int>(b) == twice)) continue;
    s.ranges.push_back({5 * b, 5});
    for (std::uint64_t i = 5 * b; i < 5 * b + 5; ++i) {
      s.params.push_back(0.5f * static_cast<float>(i) + 1.0f);
      if (opt) s.opt0.push_back(-static_cast<float>(i));
    }
  }
  return s;
}

class ShardedCheckpoints : public CheckpointFiles {
 protected:
  // Writes the sharded checkpoint of `step` from `ranks` thread ranks;
  // returns the manifest's path.
  std::string save(std::uint64_t step, int ranks = 3, int keep = 3,
                   const std::function<ck::Shard(int, int)>& make = [](int r, int n) {
                     return part(r, n);
                   }) {
    std::string path;
    strata::comm::run_thread_ranks(ranks, [&](strata::comm::Communicator& c) {
      const std::string p = ck::save_sharded(c, dir_.string(), step, sample_state(), "test layout",
                                             kValues, make(c.rank(), c.size()), keep);
      if (c.rank() == 0) path = p;
    });
    return path;
  }
  std::vector<std::string> shard_files(std::uint64_t step) {
    std::vector<std::string> files;
    char sub[64];
    std::snprintf(sub, sizeof sub, "ckpt-%09llu.shards", static_cast<unsigned long long>(step));
    for (const auto& e : fs::directory_iterator(dir_ / sub)) files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    return files;
  }
  std::vector<std::string> listing() {
    std::vector<std::string> names;
    for (const auto& e : fs::recursive_directory_iterator(dir_))
      names.push_back(fs::relative(e.path(), dir_).string());
    std::sort(names.begin(), names.end());
    return names;
  }
};

void expect_model(const ck::State& s) {
  ASSERT_EQ(s.params.size(), kValues);
  ASSERT_EQ(s.opt0.size(), kValues);
  EXPECT_TRUE(s.opt1.empty());
  for (std::uint64_t i = 0; i < kValues; ++i) {
    EXPECT_EQ(s.params[i], 0.5f * static_cast<float>(i) + 1.0f) << i;
    EXPECT_EQ(s.opt0[i], -static_cast<float>(i)) << i;
  }
  EXPECT_EQ(s.config, sample_state().config);
  EXPECT_EQ(s.state, sample_state().state);
}

}  // namespace

TEST_F(ShardedCheckpoints, EveryRankWritesItsShardAndTheManifestAssemblesTheModel) {
  const std::string manifest = save(7);
  EXPECT_EQ(fs::path(manifest).filename(), "ckpt-000000007.strata");
  EXPECT_EQ(ck::latest(dir_.string()), manifest);
  const auto files = shard_files(7);
  ASSERT_EQ(files.size(), 3u);
  const std::regex name("rank-0000[0-2]-of-00003-[0-9a-f]{8}\\.strata");
  for (const auto& f : files) EXPECT_TRUE(std::regex_match(fs::path(f).filename().string(), name)) << f;
  expect_model(ck::load(manifest));
  // The same model from one rank and from 5 (8 blocks: ranks 3 and 4 hold one each).
  for (int ranks : {1, 5}) {
    SCOPED_TRACE(ranks);
    expect_model(ck::load(save(8 + ranks, ranks)));
  }
}

TEST_F(ShardedCheckpoints, AMissingTruncatedOrCorruptShardIsRefusedNamingIt) {
  const std::string previous = save(5), manifest = save(7);
  const auto files = shard_files(7);
  const std::string good = bytes_of(files[1]);
  auto put = [&](const std::string& bytes) { std::ofstream(files[1], std::ios::binary) << bytes; };
  fs::remove(files[1]);
  expect_data_error([&] { ck::load(manifest); }, {"ckpt-000000007.strata", files[1], "is missing"});
  put(good.substr(0, good.size() - 1));
  expect_data_error([&] { ck::load(manifest); },
                    {files[1], "has " + std::to_string(good.size() - 1) + " bytes but the manifest records " +
                                   std::to_string(good.size())});
  // Every flipped bit (in memory: the manifest read as load() reads it, the
  // damaged shard given by the reader).
  put(good);
  const std::string manifest_bytes = bytes_of(manifest);
  std::string bad;
  auto read = [&](const std::string& name) {
    const std::string file = (dir_ / name).string();
    return file == files[1] ? bad : bytes_of(file);
  };
  int refused = 0, flips = 0;
  for (std::size_t i = 0; i < good.size(); ++i)
    for (int bit = 0; bit < 8; ++bit, ++flips) {
      bad = good;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      try {
        ck::parse(manifest_bytes.data(), manifest_bytes.size(), manifest, read);
      } catch (const Error& e) {
        refused += e.kind() == ErrorKind::data &&
                   std::string(e.what()).find(files[1]) != std::string::npos;
      }
    }
  EXPECT_EQ(refused, flips) << "every flipped bit of a shard is refused naming the shard file";
  // The previous checkpoint is untouched and loads.
  expect_model(ck::load(previous));
  expect_model(ck::load(manifest));
}

TEST_F(ShardedCheckpoints, ShardsThatDoNotCoverTheModelExactlyOnceAreRefused) {
  const std::string gap = save(3, 3, 3, [](int r, int n) { return part(r, n, true, 4); });
  expect_data_error([&] { ck::load(gap); }, {"values [20, 25) of the model are in no shard"});
  const std::string overlap = save(4, 3, 3, [](int r, int n) { return part(r, n, true, -1, 3); });
  expect_data_error([&] { ck::load(overlap); },
                    {"rank-00000-of-00003", "rank-00001-of-00003", "both hold values from 15 on"});
  const std::string mixed = save(5, 3, 3, [](int r, int n) { return part(r, n, r != 2); });
  expect_data_error([&] { ck::load(mixed); }, {"rank-00002-of-00003", "lacks optimizer state 0"});
}

TEST_F(ShardedCheckpoints, EveryFlippedBitAndTruncationOfTheManifestIsRefused) {
  const std::string manifest = save(2);
  const std::string good = bytes_of(manifest);
  auto read = [&](const std::string& name) { return bytes_of((dir_ / name).string()); };
  for (std::size_t n = 0; n < good.size(); ++n) {
    SCOPED_TRACE(n);
    expect_data_error([&] { ck::parse(good.data(), n, manifest, read); }, {manifest});
  }
  int refused = 0, flips = 0;
  for (std::size_t i = 0; i < good.size(); ++i)
    for (int bit = 0; bit < 8; ++bit, ++flips) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      try {
        ck::parse(bad.data(), bad.size(), manifest, read);
      } catch (const Error& e) {
        refused += e.kind() == ErrorKind::data;
      }
    }
  EXPECT_EQ(refused, flips);
  expect_model(ck::parse(good.data(), good.size(), manifest, read));
  // Without files to read the shards from, a manifest is refused.
  expect_data_error([&] { ck::parse(good.data(), good.size(), "mem"); }, {"mem", "manifest"});
}

TEST_F(ShardedCheckpoints, AShardIsNotACheckpoint) {
  save(6);
  expect_data_error([&] { ck::load(shard_files(6)[0]); },
                    {"one rank's shard of a sharded checkpoint", "ckpt-000000006.strata"});
}

TEST_F(ShardedCheckpoints, KeepsWholeCheckpointsAndRemovesWhatKilledWritersLeft) {
  fs::create_directories(dir_ / "ckpt-000000004.shards");
  fs::create_directories(dir_ / "ckpt-000000009.shards");
  // A shard of a killed write of step 9 (no manifest), a stray file in the
  // folder of step 4, and a checkpoint of a later step (a run resumed before it).
  std::ofstream(dir_ / "ckpt-000000009.shards/rank-00000-of-00003.strata.tmp") << "partial";
  std::ofstream(dir_ / "ckpt-000000004.shards/rank-00001-of-00002-0badf00d.strata") << "old";
  ck::save(dir_.string(), 12, sample_state(), 3);
  for (int step : {1, 2, 3}) save(step, 3, 2);
  ASSERT_EQ(ck::latest(dir_.string()), (dir_ / "ckpt-000000003.strata").string());
  save(4, 3, 2);
  std::vector<std::string> want{"ckpt-000000003.shards", "ckpt-000000003.strata",
                                "ckpt-000000004.shards", "ckpt-000000004.strata", "latest"};
  for (int step : {3, 4})
    for (const auto& f : shard_files(step)) want.push_back(fs::relative(f, dir_).string());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(listing(), want);
  // A whole checkpoint written over a sharded one of the same step takes its place.
  ck::save(dir_.string(), 4, sample_state(), 2);
  EXPECT_FALSE(fs::exists(dir_ / "ckpt-000000004.shards"));
  expect_model(ck::load((dir_ / "ckpt-000000003.strata").string()));
}

TEST_F(ShardedCheckpoints, AFailedShardOrManifestWriteKeepsThePreviousCheckpoint) {
  const std::string previous = save(5);
  for (int nth : {2, 4}) {  // a shard (of 3), the manifest
    SCOPED_TRACE(nth);
    ck::install_write_faults({nth, 0});
    try {
      save(7);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::runtime) << e.what();
      EXPECT_NE(std::string(e.what()).find(nth == 4 ? "ckpt-000000007.strata.tmp" : "of-00003.strata.tmp"),
                std::string::npos) << e.what();
    }
    ck::install_write_faults({});
    EXPECT_EQ(ck::latest(dir_.string()), previous);
    EXPECT_FALSE(fs::exists(dir_ / "ckpt-000000007.strata"));
    expect_model(ck::load(previous));
  }
  // The next checkpoint removes the shards of the failed one.
  save(9);
  EXPECT_FALSE(fs::exists(dir_ / "ckpt-000000007.shards"));
  expect_model(ck::load(ck::latest(dir_.string())));
}
