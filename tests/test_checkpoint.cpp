// Checkpoint files (strategies/checkpoint.hpp): round trip, verification of
// every field a corrupt file can break, and the inputs that the fuzzer
// (tests/fuzz/fuzz_checkpoint.cpp) turned up.
#include "strategies/checkpoint.hpp"

#include "backends/error.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
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
