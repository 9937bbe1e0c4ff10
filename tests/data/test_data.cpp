// Tests for the host-side data readers: IDX, CSV, synthetic data, splitting
// and normalisation, text and BPE, safetensors.
#include "data/dataset.hpp"
#include "data/bpe.hpp"
#include "data/text.hpp"
#include "data/safetensors.hpp"

#include "backends/error.hpp"
#include "strata_config.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#if STRATA_HAS_ZLIB
#include <zlib.h>
#endif

namespace fs = std::filesystem;
using strata::Error;
using strata::ErrorKind;
using namespace strata::data;

namespace {

using Bytes = std::vector<unsigned char>;

// Runs f, which must throw strata::Error of `kind` whose message contains
// every one of `parts`.
void expect_error(const std::function<void()>& f, ErrorKind kind,
                  const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no strata::Error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const std::string& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "message '" << e.what() << "' lacks '" << p << "'";
  }
}

void put32(Bytes& b, std::uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<unsigned char>(v >> s));
}

// IDX image file: magic 0x803, dims (n, rows, cols), then pixels.
Bytes idx_images(std::uint32_t n, std::uint32_t rows, std::uint32_t cols, const Bytes& pixels,
                 std::uint32_t magic = 0x00000803) {
  Bytes b;
  put32(b, magic);
  put32(b, n);
  put32(b, rows);
  put32(b, cols);
  b.insert(b.end(), pixels.begin(), pixels.end());
  return b;
}

Bytes idx_labels(std::uint32_t n, const Bytes& labels, std::uint32_t magic = 0x00000801) {
  Bytes b;
  put32(b, magic);
  put32(b, n);
  b.insert(b.end(), labels.begin(), labels.end());
  return b;
}

// Whether files are written gzip-compressed: both when zlib is available.
std::vector<bool> compress_modes() {
#if STRATA_HAS_ZLIB
  return {false, true};
#else
  return {false};
#endif
}

// A fresh directory per test, removed afterwards.
class DataFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    const auto stamp = std::chrono::steady_clock::now().time_since_epoch().count();
    dir_ = fs::temp_directory_path() /
           ("strata-test-data-" + std::string(info->name()) + "-" + std::to_string(stamp));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Writes bytes to dir/name (gzip-compressed when gz) and returns the path.
  std::string write(const std::string& name, const Bytes& bytes, bool gz = false) {
    const std::string path = (dir_ / name).string();
    if (gz) {
#if STRATA_HAS_ZLIB
      gzFile f = gzopen(path.c_str(), "wb");
      EXPECT_NE(f, nullptr);
      if (!bytes.empty()) {
        EXPECT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
                  static_cast<int>(bytes.size()));
      }
      EXPECT_EQ(gzclose(f), Z_OK);
#else
      ADD_FAILURE() << "gzip requested without zlib";
#endif
    } else {
      std::ofstream out(path, std::ios::binary);
      out.write(reinterpret_cast<const char*>(bytes.data()),
                static_cast<std::streamsize>(bytes.size()));
      EXPECT_TRUE(out.good());
    }
    return path;
  }
  std::string write_text(const std::string& name, const std::string& text) {
    return write(name, Bytes(text.begin(), text.end()));
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

// n pixel bytes covering all values 0..255 in a scrambled order (so that
// gzip cannot shrink them much).
Bytes ramp(std::size_t n) {
  Bytes b(n);
  std::uint32_t s = 12345;
  for (std::size_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    b[i] = static_cast<unsigned char>(i < 256 ? i : s >> 24);
  }
  return b;
}

}  // namespace

// ------------------------------------------------------------------ IDX

TEST_F(DataFiles, IdxRoundTripsExactly) {
  const std::uint32_t n = 7, rows = 3, cols = 5;
  const Bytes pixels = ramp(n * rows * cols);
  const Bytes labels = {0, 1, 2, 9, 4, 5, 9};
  for (bool gz : compress_modes()) {
    SCOPED_TRACE(gz ? "gzip" : "plain");
    const std::string ext = gz ? ".gz" : "";
    const std::string ip = write("img" + ext, idx_images(n, rows, cols, pixels), gz);
    const std::string lp = write("lbl" + ext, idx_labels(n, labels), gz);
    const Dataset d = read_idx(ip, lp);
    EXPECT_EQ(d.size(), n);
    EXPECT_EQ(d.features, rows * cols);
    EXPECT_EQ(d.classes, 10u);
    EXPECT_TRUE(d.is_classification());
    ASSERT_EQ(d.x.size(), pixels.size());
    for (std::size_t i = 0; i < pixels.size(); ++i)
      ASSERT_EQ(d.x[i], static_cast<float>(pixels[i]) / 255.0f) << "pixel " << i;
    ASSERT_EQ(d.labels.size(), labels.size());
    for (std::size_t i = 0; i < labels.size(); ++i) EXPECT_EQ(d.labels[i], labels[i]);
  }
}

TEST_F(DataFiles, IdxFlattensHigherRanksAndAcceptsRankTwo) {
  // Rank 4: (n, 2, 3, 2) -> 12 features.
  Bytes img;
  put32(img, 0x00000804);
  for (std::uint32_t v : {2u, 2u, 3u, 2u}) put32(img, v);
  const Bytes px = ramp(24);
  img.insert(img.end(), px.begin(), px.end());
  Dataset d = read_idx(write("r4", img), write("l", idx_labels(2, {1, 0})), 2);
  EXPECT_EQ(d.features, 12u);
  EXPECT_EQ(d.size(), 2u);
  EXPECT_EQ(d.x[23], px[23] / 255.0f);

  Bytes img2;
  put32(img2, 0x00000802);
  put32(img2, 2);
  put32(img2, 3);
  img2.insert(img2.end(), px.begin(), px.begin() + 6);
  d = read_idx(write("r2", img2), path("l"), 2);
  EXPECT_EQ(d.features, 3u);
  EXPECT_EQ(d.size(), 2u);
}

TEST_F(DataFiles, IdxMissingFile) {
  const std::string lp = write("lbl", idx_labels(1, {0}));
  expect_error([&] { read_idx(path("nope-images"), lp); }, ErrorKind::data,
               {"nope-images", "cannot open"});
  const std::string ip = write("img", idx_images(1, 1, 1, {0}));
  expect_error([&] { read_idx(ip, path("nope-labels.gz")); }, ErrorKind::data,
               {"nope-labels.gz", "cannot open"});
}

TEST_F(DataFiles, IdxWrongMagic) {
  for (bool gz : compress_modes()) {
    SCOPED_TRACE(gz ? "gzip" : "plain");
    const std::string ext = gz ? ".gz" : "";
    const std::string good_i = write("good-img" + ext, idx_images(1, 2, 2, {1, 2, 3, 4}), gz);
    const std::string good_l = write("good-lbl" + ext, idx_labels(1, {3}), gz);
    // Labels given as images and images given as labels.
    const std::string bad_i = write("bad-img" + ext, idx_labels(1, {3}), gz);
    expect_error([&] { read_idx(bad_i, good_l); }, ErrorKind::data,
                 {"bad-img" + ext, "magic", "expected 0x00000803", "found 0x00000801"});
    expect_error([&] { read_idx(good_i, good_i); }, ErrorKind::data,
                 {"good-img" + ext, "magic", "expected 0x00000801", "found 0x00000803"});
    // Another data type (0x0D: float) in an image file.
    const std::string float_i =
        write("float-img" + ext, idx_images(1, 1, 1, {0, 0, 0, 0}, 0x00000D03), gz);
    expect_error([&] { read_idx(float_i, good_l); }, ErrorKind::data,
                 {"float-img" + ext, "expected 0x00000803", "found 0x00000D03"});
  }
}

TEST_F(DataFiles, IdxTruncated) {
  for (bool gz : compress_modes()) {
    SCOPED_TRACE(gz ? "gzip" : "plain");
    const std::string ext = gz ? ".gz" : "";
    const std::string lp = write("lbl" + ext, idx_labels(4, {0, 1, 2, 3}), gz);
    // 4 images of 3x5 need 60 bytes; give 50.
    const std::string ip = write("short-img" + ext, idx_images(4, 3, 5, ramp(50)), gz);
    expect_error([&] { read_idx(ip, lp); }, ErrorKind::data,
                 {"short-img" + ext, "truncated", "expected 60 bytes of data, got 50"});
    const std::string ip_ok = write("img" + ext, idx_images(4, 3, 5, ramp(60)), gz);
    const std::string lp_short = write("short-lbl" + ext, idx_labels(4, {0, 1}), gz);
    expect_error([&] { read_idx(ip_ok, lp_short); }, ErrorKind::data,
                 {"short-lbl" + ext, "expected 4 bytes of data, got 2"});
    // A header cut in the middle of the dimensions.
    Bytes head = idx_images(4, 3, 5, {});
    head.resize(10);
    const std::string ip_head = write("head-img" + ext, head, gz);
    expect_error([&] { read_idx(ip_head, lp); }, ErrorKind::data,
                 {"head-img" + ext, "truncated", "16-byte header, got 10"});
    const std::string empty = write("empty" + ext, {}, gz);
    expect_error([&] { read_idx(empty, lp); }, ErrorKind::data, {"empty" + ext, "truncated"});
  }
}

#if STRATA_HAS_ZLIB
TEST_F(DataFiles, IdxTruncatedGzipStream) {
  // A gzip file cut short: the data it decodes to is truncated.
  const std::string full = write("full.gz", idx_images(50, 28, 28, ramp(50 * 784)), true);
  const auto size = fs::file_size(full);
  fs::resize_file(full, size / 2);
  const std::string lp = write("lbl", idx_labels(50, Bytes(50, 1)));
  expect_error([&] { read_idx(full, lp); }, ErrorKind::data,
               {"full.gz", "truncated", "expected 39200 bytes of data"});
}
#else
TEST_F(DataFiles, IdxGzipWithoutZlib) {
  // gzip of the empty string.
  const Bytes gz = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  const std::string ip = write("img.gz", gz);
  const std::string lp = write("lbl", idx_labels(1, {0}));
  expect_error([&] { read_idx(ip, lp); }, ErrorKind::data, {"img.gz", "built without zlib"});
}
#endif

TEST_F(DataFiles, IdxCountsDiffer) {
  const std::string ip = write("img", idx_images(5, 2, 2, ramp(20)));
  const std::string lp = write("lbl", idx_labels(4, {0, 1, 2, 3}));
  expect_error([&] { read_idx(ip, lp); }, ErrorKind::data,
               {"img", "lbl", "5 images", "4 labels"});
}

TEST_F(DataFiles, IdxLabelOutOfRange) {
  for (bool gz : compress_modes()) {
    SCOPED_TRACE(gz ? "gzip" : "plain");
    const std::string ext = gz ? ".gz" : "";
    const std::string ip = write("img" + ext, idx_images(5, 2, 2, ramp(20)), gz);
    const std::string lp = write("bad-lbl" + ext, idx_labels(5, {0, 1, 9, 10, 3}), gz);
    expect_error([&] { read_idx(ip, lp); }, ErrorKind::data,
                 {"bad-lbl" + ext, "label 10", "index 3", "[0, 10)"});
    expect_error([&] { read_idx(ip, lp, 5); }, ErrorKind::data,
                 {"bad-lbl" + ext, "label 9", "index 2", "[0, 5)"});
    EXPECT_NO_THROW(read_idx(ip, lp, 11));
  }
}

// Found by fuzz_idx (tests/fuzz/corpus/fuzz_idx/regression-huge-header): a
// few bytes whose header claims 2^31 images of 1000x1000 pixels made the
// reader reserve all of them (8 PB) before reading any; under AddressSanitizer
// that aborted the program. Memory now follows the data that arrives.
TEST_F(DataFiles, IdxHeaderClaimingHugeSizesIsTruncationNotAnAllocation) {
  for (bool gz : compress_modes()) {
    SCOPED_TRACE(gz ? "gzip" : "plain");
    const std::string ext = gz ? ".gz" : "";
    const std::string ip = write("huge-img" + ext, idx_images(0x7FFFFFFF, 1000, 1000, {1, 2, 3, 4}), gz);
    const std::string lp = write("huge-lbl" + ext, idx_labels(0x7FFFFFFF, {0, 1}), gz);
    expect_error([&] { read_idx(ip, lp); }, ErrorKind::data,
                 {"huge-img" + ext, "truncated", "expected 2147483647000000 bytes of data, got 4"});
  }
}

TEST_F(DataFiles, FashionMnistLayoutPlainAndGzip) {
  // Small stand-ins with the real names: plain for train, gzip for t10k
  // (when zlib is available).
  const bool gz = compress_modes().back();
  const std::string ext = gz ? ".gz" : "";
  write("train-images-idx3-ubyte", idx_images(6, 28, 28, ramp(6 * 784)));
  write("train-labels-idx1-ubyte", idx_labels(6, {0, 1, 2, 3, 4, 9}));
  write("t10k-images-idx3-ubyte" + ext, idx_images(2, 28, 28, ramp(2 * 784)), gz);
  write("t10k-labels-idx1-ubyte" + ext, idx_labels(2, {7, 8}), gz);
  const Split s = load_fashion_mnist(dir_.string());
  EXPECT_EQ(s.train.size(), 6u);
  EXPECT_EQ(s.test.size(), 2u);
  EXPECT_EQ(s.train.features, 784u);
  EXPECT_EQ(s.test.labels, (std::vector<std::int32_t>{7, 8}));

  fs::remove(path("t10k-labels-idx1-ubyte" + ext));
  expect_error([&] { load_fashion_mnist(dir_.string()); }, ErrorKind::data,
               {"t10k-labels-idx1-ubyte", dir_.string()});
}

TEST_F(DataFiles, FashionMnistMissingDirectory) {
  const std::string missing = path("no-such-dir");
  expect_error([&] { load_fashion_mnist(missing); }, ErrorKind::data,
               {missing, "apt-get install dataset-fashion-mnist", "--data-dir"});
}

TEST(Data, DefaultFashionMnistDir) {
  const char* old = std::getenv("STRATA_FASHION_MNIST_DIR");
  const std::string saved = old != nullptr ? old : "";
  unsetenv("STRATA_FASHION_MNIST_DIR");
  EXPECT_EQ(default_fashion_mnist_dir(), "/usr/share/datasets/fashion-mnist");
  setenv("STRATA_FASHION_MNIST_DIR", "/somewhere/else", 1);
  EXPECT_EQ(default_fashion_mnist_dir(), "/somewhere/else");
  if (old != nullptr)
    setenv("STRATA_FASHION_MNIST_DIR", saved.c_str(), 1);
  else
    unsetenv("STRATA_FASHION_MNIST_DIR");
}

TEST(Data, RealFashionMnist) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (!fs::is_directory(dir))
    GTEST_SKIP() << dir << " not found (apt-get install dataset-fashion-mnist)";
#if !STRATA_HAS_ZLIB
  if (!fs::exists(fs::path(dir) / "train-images-idx3-ubyte")) {
    expect_error([&] { load_fashion_mnist(dir); }, ErrorKind::data, {"built without zlib"});
    GTEST_SKIP() << "built without zlib: cannot read the gzip files in " << dir;
  }
#endif
  const Split s = load_fashion_mnist(dir);
  EXPECT_EQ(s.train.size(), 60000u);
  EXPECT_EQ(s.test.size(), 10000u);
  for (const Dataset* d : {&s.train, &s.test}) {
    EXPECT_EQ(d->features, 784u);
    EXPECT_EQ(d->classes, 10u);
    ASSERT_EQ(d->labels.size(), d->size());
    std::vector<std::size_t> per_class(10, 0);
    for (std::int32_t l : d->labels) {
      ASSERT_GE(l, 0);
      ASSERT_LT(l, 10);
      ++per_class[static_cast<std::size_t>(l)];
    }
    // Fashion-MNIST is balanced.
    for (std::size_t c : per_class) EXPECT_EQ(c, d->size() / 10);
    float lo = 1, hi = 0;
    for (float v : d->x) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    EXPECT_EQ(lo, 0.0f);
    EXPECT_EQ(hi, 1.0f);
  }
}

// ------------------------------------------------------------------ CSV

TEST_F(DataFiles, CsvClassification) {
  const std::string p = write_text("iris.csv",
                                   "# a comment\r\n"
                                   "x1, x2 ,label\r\n"
                                   "\r\n"
                                   " 1.5 , -2 , 2\r\n"
                                   "# another\n"
                                   "3e-1,4,0\n"
                                   "\t5,6.25,1");
  Dataset d = read_csv(p, CsvTask::classification);
  EXPECT_EQ(d.name, p);
  EXPECT_EQ(d.features, 2u);
  EXPECT_EQ(d.size(), 3u);
  EXPECT_EQ(d.classes, 3u);  // max label + 1
  EXPECT_EQ(d.x, (std::vector<float>{1.5f, -2.0f, 0.3f, 4.0f, 5.0f, 6.25f}));
  EXPECT_EQ(d.labels, (std::vector<std::int32_t>{2, 0, 1}));
  EXPECT_TRUE(d.targets.empty());

  d = read_csv(p, CsvTask::classification, 5);
  EXPECT_EQ(d.classes, 5u);

  // No header; a label written as 1.0 is still an integer.
  const std::string q = write_text("plain.csv", "0.5,1.0\n0.25,0\n");
  d = read_csv(q, CsvTask::classification);
  EXPECT_EQ(d.features, 1u);
  EXPECT_EQ(d.labels, (std::vector<std::int32_t>{1, 0}));
  EXPECT_EQ(d.classes, 2u);
}

TEST_F(DataFiles, CsvRegression) {
  const std::string p = write_text("reg.csv",
                                   "a,b,c,y1,y2\n"
                                   "1,2,3,0.5,-0.5\n"
                                   "# skip\n"
                                   "4,5,6,1.5,2.5\n");
  Dataset d = read_csv(p, CsvTask::regression, 0, 2);
  EXPECT_FALSE(d.is_classification());
  EXPECT_EQ(d.features, 3u);
  EXPECT_EQ(d.target_width, 2u);
  EXPECT_EQ(d.size(), 2u);
  EXPECT_EQ(d.x, (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(d.targets, (std::vector<float>{0.5f, -0.5f, 1.5f, 2.5f}));
  EXPECT_TRUE(d.labels.empty());

  d = read_csv(p, CsvTask::regression);  // one target
  EXPECT_EQ(d.features, 4u);
  EXPECT_EQ(d.targets, (std::vector<float>{-0.5f, 2.5f}));

  expect_error([&] { read_csv(p, CsvTask::regression, 0, 5); }, ErrorKind::data,
               {"reg.csv", "line 1", "target_width 5", "found 5 fields"});
  expect_error([&] { read_csv(p, CsvTask::regression, 0, 0); }, ErrorKind::config,
               {"target_width"});
}

TEST_F(DataFiles, CsvRagged) {
  const std::string p = write_text("ragged.csv", "x,y,label\n1,2,0\n3,4\n");
  expect_error([&] { read_csv(p, CsvTask::classification); }, ErrorKind::data,
               {"ragged.csv", "line 3", "expected 3 fields", "found 2"});
  const std::string q = write_text("trailing.csv", "1,2,0\n3,4,1,\n");
  expect_error([&] { read_csv(q, CsvTask::classification); }, ErrorKind::data,
               {"trailing.csv", "line 2", "expected 3 fields", "found 4"});
}

TEST_F(DataFiles, CsvNonNumeric) {
  const std::string p = write_text("text.csv", "1,2,0\n# c\n3,abc,1\n");
  expect_error([&] { read_csv(p, CsvTask::classification); }, ErrorKind::data,
               {"text.csv", "line 3", "field 2", "'abc'"});
  const std::string q = write_text("partial.csv", "1,2,0\n3,4x,1\n");
  expect_error([&] { read_csv(q, CsvTask::classification); }, ErrorKind::data,
               {"partial.csv", "line 2", "'4x'"});
  const std::string e = write_text("emptyfield.csv", "1,2,0\r\n3, ,1\r\n");
  expect_error([&] { read_csv(e, CsvTask::classification); }, ErrorKind::data,
               {"emptyfield.csv", "line 2", "field 2", "''"});
  const std::string t = write_text("target.csv", "1,2,0.5\n3,4,nan\n");
  expect_error([&] { read_csv(t, CsvTask::regression); }, ErrorKind::data,
               {"target.csv", "line 2", "field 3", "'nan'"});
}

TEST_F(DataFiles, CsvBadLabels) {
  const std::string frac = write_text("frac.csv", "1,0\n2,2.5\n");
  expect_error([&] { read_csv(frac, CsvTask::classification); }, ErrorKind::data,
               {"frac.csv", "line 2", "'2.5'", "not an integer"});
  const std::string word = write_text("word.csv", "1,cat\n");
  expect_error([&] { read_csv(word, CsvTask::classification); }, ErrorKind::data,
               {"word.csv", "line 1", "'cat'", "not an integer"});
  const std::string neg = write_text("neg.csv", "h1,h2\n1,0\n2,-1\n");
  expect_error([&] { read_csv(neg, CsvTask::classification); }, ErrorKind::data,
               {"neg.csv", "line 3", "'-1'", "negative"});
  const std::string big = write_text("big.csv", "1,0\n2,4\n3,1\n");
  expect_error([&] { read_csv(big, CsvTask::classification, 3); }, ErrorKind::data,
               {"big.csv", "line 2", "label 4", "[0, 3)"});
  EXPECT_EQ(read_csv(big, CsvTask::classification).classes, 5u);
  const std::string one = write_text("one.csv", "1\n2\n");
  expect_error([&] { read_csv(one, CsvTask::classification); }, ErrorKind::data,
               {"one.csv", "line 1", "at least 2"});
}

TEST_F(DataFiles, CsvEmptyAndMissing) {
  const std::string empty = write_text("empty.csv", "");
  expect_error([&] { read_csv(empty, CsvTask::classification); }, ErrorKind::data,
               {"empty.csv", "no samples"});
  const std::string header = write_text("header.csv", "# only\nx,label\n\n");
  expect_error([&] { read_csv(header, CsvTask::classification); }, ErrorKind::data,
               {"header.csv", "no samples"});
  expect_error([&] { read_csv(path("missing.csv"), CsvTask::regression); }, ErrorKind::data,
               {"missing.csv", "cannot open"});
}

// ------------------------------------------------------------ synthetic

TEST(Data, SyntheticShapesAndDeterminism) {
  const Dataset a = make_synthetic(100, 7, CsvTask::classification, 4, 42);
  EXPECT_EQ(a.name, "synthetic");
  EXPECT_EQ(a.size(), 100u);
  EXPECT_EQ(a.features, 7u);
  EXPECT_EQ(a.x.size(), 700u);
  EXPECT_EQ(a.classes, 4u);
  ASSERT_EQ(a.labels.size(), 100u);
  std::vector<int> seen(4, 0);
  for (std::int32_t l : a.labels) {
    ASSERT_GE(l, 0);
    ASSERT_LT(l, 4);
    seen[static_cast<std::size_t>(l)] = 1;
  }
  EXPECT_EQ(seen, (std::vector<int>{1, 1, 1, 1}));

  const Dataset b = make_synthetic(100, 7, CsvTask::classification, 4, 42);
  EXPECT_EQ(a.x, b.x);
  EXPECT_EQ(a.labels, b.labels);
  const Dataset c = make_synthetic(100, 7, CsvTask::classification, 4, 43);
  EXPECT_NE(a.x, c.x);
  EXPECT_NE(a.labels, c.labels);

  const Dataset r = make_synthetic(50, 3, CsvTask::regression, 2, 42);
  EXPECT_FALSE(r.is_classification());
  EXPECT_EQ(r.size(), 50u);
  EXPECT_EQ(r.target_width, 2u);
  EXPECT_EQ(r.targets.size(), 100u);
  EXPECT_TRUE(r.labels.empty());
  EXPECT_EQ(r.targets, make_synthetic(50, 3, CsvTask::regression, 2, 42).targets);
  EXPECT_NE(r.targets, make_synthetic(50, 3, CsvTask::regression, 2, 7).targets);

  // Roughly N(0, 1).
  const Dataset big = make_synthetic(2000, 10, CsvTask::regression, 1, 1);
  double sum = 0, sq = 0;
  for (float v : big.x) {
    sum += v;
    sq += double{v} * v;
  }
  const double count = static_cast<double>(big.x.size());
  const double mean = sum / count;
  EXPECT_NEAR(mean, 0.0, 0.05);
  EXPECT_NEAR(sq / count - mean * mean, 1.0, 0.05);
}

TEST(Data, SyntheticRejectsZeroSizes) {
  expect_error([] { make_synthetic(10, 0, CsvTask::classification, 3, 1); }, ErrorKind::config,
               {"features"});
  expect_error([] { make_synthetic(10, 4, CsvTask::classification, 0, 1); }, ErrorKind::config,
               {"classes"});
  expect_error([] { make_synthetic(10, 4, CsvTask::regression, 0, 1); }, ErrorKind::config,
               {"targets"});
}

// -------------------------------------------------- split and normalise

TEST(Data, SplitTail) {
  const Dataset all = make_synthetic(10, 3, CsvTask::classification, 5, 9);
  Split s = split_tail(all, 0.3);
  EXPECT_EQ(s.train.size(), 7u);
  EXPECT_EQ(s.test.size(), 3u);
  EXPECT_EQ(s.test.features, 3u);
  EXPECT_EQ(s.test.classes, 5u);
  EXPECT_EQ(s.train.x, std::vector<float>(all.x.begin(), all.x.begin() + 21));
  EXPECT_EQ(s.test.x, std::vector<float>(all.x.begin() + 21, all.x.end()));
  EXPECT_EQ(s.test.labels, std::vector<std::int32_t>(all.labels.begin() + 7, all.labels.end()));

  s = split_tail(all, 0.01);  // at least one
  EXPECT_EQ(s.test.size(), 1u);
  s = split_tail(all, 0.0);
  EXPECT_EQ(s.train.size(), 10u);
  EXPECT_EQ(s.test.size(), 0u);

  const Dataset reg = make_synthetic(4, 2, CsvTask::regression, 3, 9);
  s = split_tail(reg, 0.5);
  EXPECT_EQ(s.test.size(), 2u);
  EXPECT_EQ(s.test.target_width, 3u);
  EXPECT_EQ(s.test.targets, std::vector<float>(reg.targets.begin() + 6, reg.targets.end()));
  EXPECT_EQ(s.train.targets.size(), 6u);

  expect_error([&] { split_tail(all, 1.0); }, ErrorKind::config, {"fraction"});
  expect_error([&] { split_tail(make_synthetic(1, 2, CsvTask::regression, 1, 1), 0.5); },
               ErrorKind::config, {"no training samples"});
}

TEST(Data, Normalizer) {
  Dataset d = make_synthetic(500, 4, CsvTask::regression, 1, 3);
  for (std::size_t i = 0; i < d.size(); ++i) {
    d.x[i * 4 + 0] = d.x[i * 4 + 0] * 10 + 100;
    d.x[i * 4 + 1] = d.x[i * 4 + 1] * 0.01f - 3;
    d.x[i * 4 + 3] = 7;  // constant: only centred
  }
  const Normalizer z = Normalizer::fit(d, true);
  ASSERT_EQ(z.mean.size(), 4u);
  EXPECT_EQ(z.inv_std[3], 1.0f);
  z.apply(d);
  const double n = static_cast<double>(d.size());
  for (std::size_t j = 0; j < 4; ++j) {
    double sum = 0, sq = 0;
    for (std::size_t i = 0; i < d.size(); ++i) sum += d.x[i * 4 + j];
    const double mean = sum / n;
    for (std::size_t i = 0; i < d.size(); ++i) sq += std::pow(d.x[i * 4 + j] - mean, 2);
    EXPECT_NEAR(mean, 0.0, 1e-4) << "feature " << j;
    EXPECT_NEAR(std::sqrt(sq / n), j == 3 ? 0.0 : 1.0, 1e-4) << "feature " << j;
  }

  // One scalar over everything (pixel-like data).
  Dataset p = make_synthetic(300, 5, CsvTask::classification, 2, 4);
  for (float& v : p.x) v = v * 0.2f + 0.5f;
  const Normalizer s = Normalizer::fit(p, false);
  ASSERT_EQ(s.mean.size(), 1u);
  EXPECT_NEAR(s.mean[0], 0.5, 0.02);
  s.apply(p);
  double sum = 0, sq = 0;
  for (float v : p.x) sum += v;
  for (float v : p.x) sq += double{v} * v;
  const double count = static_cast<double>(p.x.size());
  EXPECT_NEAR(sum / count, 0.0, 1e-5);
  EXPECT_NEAR(sq / count, 1.0, 1e-4);

  Dataset other = make_synthetic(3, 2, CsvTask::regression, 1, 1);
  expect_error([&] { z.apply(other); }, ErrorKind::config, {"4 features", "2 features"});
}

// ------------------------------------------------------------------ text

namespace strata::data {

// Windows hold the next token as each position's label, the validation tail
// is cut before windows form, and the ids are the bytes.
TEST_F(DataFiles, TextWindowsAreNextTokenPairsWithAHeldOutTail) {
  const std::string text = "abcdefghijklmnopqrstuvwxyz0123\xc3\xa9";  // 32 bytes, one not ASCII
  const auto tokens = byte_tokens(read_text(write_text("corpus.txt", text)));
  ASSERT_EQ(tokens.size(), 32u);
  EXPECT_EQ(tokens[31], 0xa9);
  // 25% of 32 = 8 tokens of validation tail: 24 training tokens -> (24 - 1) / 5 = 4 windows.
  const Split s = text_windows(tokens, 5, 256, 0.25, "corpus");
  ASSERT_EQ(s.train.size(), 4u);
  EXPECT_EQ(s.train.label_width, 5u);
  EXPECT_EQ(s.train.classes, 256u);
  EXPECT_EQ(s.train.shape, std::vector<std::size_t>{5});
  for (std::size_t k = 0; k < 4; ++k)
    for (std::size_t t = 0; t < 5; ++t) {
      EXPECT_EQ(s.train.x[k * 5 + t], static_cast<float>(text[k * 5 + t]));
      EXPECT_EQ(s.train.labels[k * 5 + t], static_cast<int>(text[k * 5 + t + 1]));
    }
  // The tail: tokens 24..31, one window of 5 (+1): starts at token 24.
  ASSERT_EQ(s.test.size(), 1u);
  EXPECT_EQ(s.test.x[0], static_cast<float>('y'));
  EXPECT_EQ(s.test.labels[4], static_cast<int>('3'));
}

TEST_F(DataFiles, TextDirectoriesJoinTheirTextFilesInNameOrder) {
  write_text("b.txt", "world");
  write_text("a.txt", "hello ");
  write("a.dat", Bytes{1, 0, 2});  // binary (a fortune index): skipped
  fs::create_symlink(dir_ / "a.txt", dir_ / "a.u8");  // a link: skipped
  EXPECT_EQ(read_text(dir_.string()), "hello world");
}

TEST_F(DataFiles, TextErrorsNameTheCorpusAndTheProblem) {
  auto data_error = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::data) << e.message();
      return e.message();
    }
    return std::string("no error");
  };
  EXPECT_NE(data_error([&] { read_text(path("missing.txt")); }).find("does not exist"), std::string::npos);
  EXPECT_NE(data_error([&] { read_text(write_text("empty.txt", "")); }).find("is empty"), std::string::npos);
  const auto tokens = byte_tokens("short text");
  EXPECT_NE(data_error([&] { text_windows(tokens, 16, 256, 0.0, "short"); })
                .find("'short': 10 tokens are too few for one training window of --seq-len 16"),
            std::string::npos);
  EXPECT_NE(data_error([&] { text_windows(tokens, 4, 256, 0.2, "short"); })
                .find("the validation tail of 2 tokens (--test-fraction 0.2) is too short"),
            std::string::npos);
  EXPECT_NE(data_error([&] { text_windows({1, 2, 300, 4}, 2, 256, 0.0, "ids"); })
                .find("'ids': token 2 has id 300, outside the vocabulary [0, 256)"),
            std::string::npos);
}

// BPE: the merges of a known text by hand (the oracle), the round trip, the
// file, and bad files naming the line.
TEST_F(DataFiles, BpeLearnsTheMostFrequentPairsAndRoundTrips) {
  // "aaab aaab aaab": (a, a) occurs 6 times; ties go to the smallest pair.
  const std::string text = "aaab aaab aaab";
  const Bpe bpe = train_bpe(text, 259);
  ASSERT_EQ(bpe.merges.size(), 3u);
  EXPECT_EQ(bpe.merges[0], std::make_pair('a' + 0, 'a' + 0));   // 256 = aa
  // Then "aaab" is (aa, a, b): (aa, a) and (a, b) occur 3 times each; the
  // smaller pair wins (a < aa).
  EXPECT_EQ(bpe.merges[1], std::make_pair('a' + 0, 'b' + 0));   // 257 = ab
  EXPECT_EQ(bpe.merges[2], std::make_pair(256, 257));           // 258 = aaab
  EXPECT_EQ(encode(bpe, text), (std::vector<std::int32_t>{258, ' ', 258, ' ', 258}));
  EXPECT_EQ(decode(bpe, encode(bpe, text)), text);
  // No pair occurs twice: training stops short of the vocabulary asked for.
  EXPECT_EQ(train_bpe("abcd", 300).merges.size(), 0u);
  // Any text round-trips, including bytes the training text never had.
  const std::string other = std::string("aab\n\xff") + std::string(1, '\0') + "aaab";
  EXPECT_EQ(decode(bpe, encode(bpe, other)), other);
  write_bpe(bpe, path("t.bpe"));
  const Bpe back = read_bpe(path("t.bpe"));
  EXPECT_EQ(back.merges, bpe.merges);
}

TEST_F(DataFiles, BadBpeFilesNameTheLine) {
  auto error_of = [&](const std::string& body) {
    const std::string p = write_text("bad.bpe", body);
    try {
      read_bpe(p);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::data);
      return e.message();
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of("hello\n").find("line 1: expected 'strata-bpe 1'"), std::string::npos);
  EXPECT_NE(error_of("strata-bpe 1\nvocab 12\n").find("line 2: expected 'vocab N'"), std::string::npos);
  EXPECT_NE(error_of("strata-bpe 1\nvocab 258\n97 97\n97 300\n")
                .find("line 4: merge 1 uses id 300, but only ids below 257 exist"),
            std::string::npos);
  EXPECT_NE(error_of("strata-bpe 1\nvocab 258\n97 97 1\n").find("line 3: expected two ids"),
            std::string::npos);
  EXPECT_NE(error_of("strata-bpe 1\nvocab 300\n97 97\n").find("says vocab 300 but holds 1 merges"),
            std::string::npos);
}

TEST(SyntheticTokens, SeededIdsAndLabelsBelowTheVocabulary) {
  const Dataset a = make_synthetic_tokens(7, 5, 11, 3), b = make_synthetic_tokens(7, 5, 11, 3);
  EXPECT_EQ(a.x, b.x);
  EXPECT_EQ(a.labels, b.labels);
  ASSERT_EQ(a.size(), 7u);
  EXPECT_EQ(a.label_width, 5u);
  std::vector<int> seen(11, 0);
  for (float v : a.x) {
    ASSERT_TRUE(v >= 0 && v < 11 && v == static_cast<int>(v));
    seen[static_cast<int>(v)] = 1;
  }
  for (int l : a.labels) ASSERT_TRUE(l >= 0 && l < 11);
  EXPECT_GT(std::count(seen.begin(), seen.end(), 1), 8);  // 35 draws cover most of 11 ids
}


// ----------------------------------------------------------------- safetensors
namespace st = strata::safetensors;

// A safetensors file from its header text and data bytes, as the format
// lays it out (written here by hand, not by st::serialize).
std::string st_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + data;
}
template <class T>
std::string raw(std::initializer_list<T> values) {
  std::string s;
  for (T v : values) s.append(reinterpret_cast<const char*>(&v), sizeof v);
  return s;
}

TEST(Safetensors, ReadsAFileWrittenByHand) {
  // 2x3 F32, then 2 BF16 values (1.0 and -2.0: bits 0x3f80 and 0xc000), metadata.
  const std::string data = raw<float>({1, -2, 3.5f, 0, 1e-3f, 7}) + raw<std::uint16_t>({0x3f80, 0xc000});
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
      R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[24,28]}}  )";
  const st::File f = st::parse(st_file(header, data), "hand.safetensors");
  EXPECT_EQ(f.metadata.at("format"), "pt");
  ASSERT_EQ(f.tensors.size(), 2u);
  ASSERT_NE(f.find("w"), nullptr);
  EXPECT_EQ(f.find("w")->shape, (std::vector<std::uint64_t>{2, 3}));
  EXPECT_EQ(f.find("w")->to_float(), (std::vector<float>{1, -2, 3.5f, 0, 1e-3f, 7}));
  EXPECT_EQ(f.find("b")->to_float(), (std::vector<float>{1, -2}));
  EXPECT_EQ(f.tensors[0].name, "w");  // in the order of their data
}

TEST(Safetensors, EveryDtypeRoundTripsAndRoundsToNearest) {
  const std::vector<double> exact{0, 1, -2, 3, 96, -7};  // exact in every dtype but BOOL and U8
  const float third = 1.0f / 3.0f;
  st::File f;
  for (st::DType t : {st::DType::F64, st::DType::F32, st::DType::F16, st::DType::BF16, st::DType::I64,
                      st::DType::I32, st::DType::I16, st::DType::I8})
    f.tensors.push_back(st::make_tensor(std::string("t_") + st::to_string(t), {2, 3}, exact, t));
  f.tensors.push_back(st::make_tensor("third_bf16", {1}, &third, st::DType::BF16));
  f.tensors.push_back(st::make_tensor("third_f16", {1}, &third, st::DType::F16));
  f.tensors.push_back(st::make_tensor("scalar", {}, std::vector<double>{42}, st::DType::I64));
  f.metadata["note"] = "written by the test";
  const st::File g = st::parse(st::serialize(f), "round trip");
  EXPECT_EQ(g.metadata, f.metadata);
  ASSERT_EQ(g.tensors.size(), f.tensors.size());
  for (std::size_t i = 0; i + 3 < f.tensors.size(); ++i)
    EXPECT_EQ(g.tensors[i].to_double(), exact) << g.tensors[i].name;
  // 1/3 rounded to nearest even: bf16 0x3eab (0.333984375), fp16 0x3555 (0.333251953125).
  EXPECT_EQ(g.find("third_bf16")->to_double(), std::vector<double>{0.333984375});
  EXPECT_EQ(g.find("third_f16")->to_double(), std::vector<double>{0.333251953125});
  EXPECT_EQ(g.find("scalar")->to_double(), std::vector<double>{42});
  // The header is padded so that the data begin 8-byte aligned.
  const std::string bytes = st::serialize(f);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes[8], '{');
}

// Each way a file can be wrong: a data error naming the file (and the tensor).
TEST(Safetensors, DamagedFilesAreRefusedNamingTheFileAndTensor) {
  const std::string w = raw<float>({1, 2, 3, 4});
  auto entry = [](const std::string& name, const std::string& dtype, const std::string& shape,
                  const std::string& offsets) {
    return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
           ",\"data_offsets\":" + offsets + "}";
  };
  struct Case {
    const char* what;
    std::string bytes, expect;
  };
  const std::string good_header = "{" + entry("w", "F32", "[2,2]", "[0,16]") + "}";
  const std::string good = st_file(good_header, w);
  std::string long_header = good;
  long_header[0] = static_cast<char>(0xff);  // header length 255 > the file
  const std::vector<Case> cases{
      {"empty", "", "shorter than the 8-byte header length"},
      {"truncated data", good.substr(0, good.size() - 3), "tensor 'w': data_offsets [0, 16] reach past the 13 bytes"},
      {"header longer than the file", long_header, "the header says it is 255 bytes long"},
      {"not safetensors", std::string("\x89PNG\r\n\x1a\n", 8) + std::string(40, 'x'), "the header says it is"},
      {"not JSON", st_file("{\"w\": [", ""), "the header is not a JSON object"},
      {"unknown dtype", st_file("{" + entry("w", "F8", "[2,2]", "[0,16]") + "}", w), "tensor 'w': unknown dtype 'F8'"},
      {"negative dimension", st_file("{" + entry("w", "F32", "[-2,2]", "[0,16]") + "}", w), "tensor 'w': shape [-2,2] is not"},
      {"size and offsets disagree", st_file("{" + entry("w", "F32", "[3,2]", "[0,16]") + "}", w), "tensor 'w': shape [3, 2] of F32 needs 24 bytes"},
      {"out of range", st_file("{" + entry("w", "F32", "[2,2]", "[4,20]") + "}", w), "tensor 'w': data_offsets [4, 20] reach past the 16 bytes"},
      {"begin after end", st_file("{" + entry("w", "F32", "[2,2]", "[16,0]") + "}", w), "begin <= end"},
      {"overlap", st_file("{" + entry("a", "F32", "[2]", "[0,8]") + "," + entry("b", "F32", "[2]", "[4,12]") + "}", w),
       "tensor 'b' (bytes [4, 12)) overlaps tensor 'a'"},
      {"hole", st_file("{" + entry("a", "F32", "[2]", "[0,8]") + "," + entry("b", "F32", "[1]", "[12,16]") + "}", w),
       "bytes [8, 12) of the data belong to no tensor"},
      {"unused tail", st_file("{" + entry("a", "F32", "[2]", "[0,8]") + "}", w), "bytes [8, 16) of the data belong to no tensor"},
      {"duplicate name", st_file("{" + entry("a", "F32", "[2]", "[0,8]") + "," + entry("a", "F32", "[2]", "[8,16]") + "}", w),
       "tensor 'a' appears twice"},
      {"deep nesting", st_file("{" + entry("w", "F32", "[[[[2]]],2]", "[0,16]") + "}", w),
       "the header nests objects or arrays 6 deep"},
      {"bad metadata", st_file("{\"__metadata__\":{\"k\":3}," + entry("w", "F32", "[2,2]", "[0,16]") + "}", w),
       "__metadata__ entry 'k' is not a string"},
  };
  for (const Case& c : cases) {
    try {
      st::parse(c.bytes, "bad.safetensors");
      ADD_FAILURE() << c.what << ": accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::data) << c.what;
      EXPECT_NE(e.message().find("safetensors file 'bad.safetensors'"), std::string::npos) << c.what << ": " << e.message();
      EXPECT_NE(e.message().find(c.expect), std::string::npos) << c.what << ": " << e.message();
    }
  }
  EXPECT_EQ(st::parse(good, "good").tensors.size(), 1u);  // the cases differ from a good file by their defect
}

TEST_F(DataFiles, SafetensorsWriteIsAtomicAndReadBack) {
  st::File f;
  const std::vector<float> v{1.5f, -0.25f};
  f.tensors.push_back(st::make_tensor("x", {2}, v.data(), st::DType::F32));
  const std::string p = path("model.safetensors");
  st::write(p, f);
  EXPECT_EQ(st::read(p).find("x")->to_float(), v);
  EXPECT_FALSE(fs::exists(p + ".tmp"));
  try {
    st::write(path("no-such-dir/model.safetensors"), f);
    ADD_FAILURE() << "wrote into a missing directory";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::runtime);
    EXPECT_NE(e.message().find("no-such-dir/model.safetensors"), std::string::npos) << e.message();
  }
  try {
    st::read(path("missing.safetensors"));
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::data);
    EXPECT_NE(e.message().find("missing.safetensors"), std::string::npos);
  }
}

}  // namespace strata::data
