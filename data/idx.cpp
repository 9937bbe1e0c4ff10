// IDX readers (MNIST / Fashion-MNIST format), gzip-compressed or plain.
#include "data/dataset.hpp"

#include "backends/error.hpp"
#include "strata_config.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <stdexcept>

#if STRATA_HAS_ZLIB
#include <zlib.h>
#endif

namespace strata::data {

namespace {

constexpr std::uint32_t idx_labels_magic = 0x00000801;
constexpr std::uint32_t idx_images_magic = 0x00000803;

std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", static_cast<unsigned>(v));
  return buf;
}

// A file read sequentially: through zlib when available (which decodes gzip
// and passes plain files through), else through stdio.
class InputFile {
 public:
  explicit InputFile(const std::string& path) : path_(path) {
#if STRATA_HAS_ZLIB
    errno = 0;
    gz_ = gzopen(path.c_str(), "rb");
    if (gz_ == nullptr)
      STRATA_THROW(data, "cannot open '", path, "': ",
                   errno != 0 ? std::strerror(errno) : "out of memory");
    gzbuffer(gz_, 1u << 18);
#else
    file_ = std::fopen(path.c_str(), "rb");
    if (file_ == nullptr) STRATA_THROW(data, "cannot open '", path, "': ", std::strerror(errno));
    unsigned char head[2] = {0, 0};
    const std::size_t got = std::fread(head, 1, 2, file_);
    if (got == 2 && head[0] == 0x1f && head[1] == 0x8b) {
      std::fclose(file_);
      file_ = nullptr;
      STRATA_THROW(data, "'", path,
                   "' is gzip-compressed but Strata was built without zlib: decompress it "
                   "(gunzip) or rebuild with zlib (STRATA_ENABLE_ZLIB)");
    }
    std::rewind(file_);
#endif
  }
  ~InputFile() {
#if STRATA_HAS_ZLIB
    if (gz_ != nullptr) gzclose(gz_);
#else
    if (file_ != nullptr) std::fclose(file_);
#endif
  }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  // Reads up to n bytes; fewer only at the end of the data. Throws on a read
  // error or corrupt compressed data.
  std::size_t read(void* buf, std::size_t n) {
    auto* out = static_cast<unsigned char*>(buf);
    std::size_t total = 0;
#if STRATA_HAS_ZLIB
    while (total < n) {
      const unsigned want =
          static_cast<unsigned>(std::min<std::size_t>(n - total, std::size_t{1} << 30));
      const int got = gzread(gz_, out + total, want);
      if (got < 0) {
        int code = 0;
        const char* msg = gzerror(gz_, &code);
        if (code == Z_ERRNO)
          STRATA_THROW(data, "cannot read '", path_, "': ", std::strerror(errno));
        STRATA_THROW(data, "'", path_, "': corrupt gzip data (", msg, ")");
      }
      if (got == 0) break;
      total += static_cast<std::size_t>(got);
    }
#else
    total = std::fread(out, 1, n, file_);
    if (total < n && std::ferror(file_))
      STRATA_THROW(data, "cannot read '", path_, "': ", std::strerror(errno));
#endif
    return total;
  }

  // How many bytes of data the file can plausibly still hold: its size on
  // disk for a plain file, 8 times that for a compressed one (IDX pixels
  // rarely compress better). A bound for reserving memory, not a promise.
  std::size_t plausible_bytes() const {
    std::error_code ec;
    const auto size = std::filesystem::file_size(path_, ec);
    if (ec) return std::numeric_limits<std::size_t>::max();
#if STRATA_HAS_ZLIB
    if (gzdirect(gz_) == 0) return size > std::numeric_limits<std::size_t>::max() / 8 ? size : size * 8;
#endif
    return size;
  }

  // Extra words for a short read: why the data ended early, if known.
  std::string short_read_note() const {
#if STRATA_HAS_ZLIB
    int code = 0;
    gzerror(gz_, &code);
    if (code == Z_BUF_ERROR) return " (the compressed stream ends early)";
#endif
    return {};
  }

 private:
  std::string path_;
#if STRATA_HAS_ZLIB
  gzFile gz_ = nullptr;
#else
  std::FILE* file_ = nullptr;
#endif
};

struct IdxHeader {
  std::uint32_t magic = 0;
  std::vector<std::uint32_t> dims;
};

std::uint32_t big_endian32(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

// Reads magic and dimensions. Image files accept uint8 of any rank >= 2 (magic
// 0x000008NN, NN >= 2); label files need 0x00000801.
IdxHeader read_header(InputFile& in, const std::string& path, bool images) {
  const std::uint32_t expected = images ? idx_images_magic : idx_labels_magic;
  const char* what = images ? "IDX uint8 images" : "IDX uint8 labels";
  unsigned char buf[4];
  std::size_t got = in.read(buf, 4);
  if (got < 4)
    STRATA_THROW(data, "'", path, "' is truncated: expected a 4-byte magic number, got ", got,
                 " bytes", in.short_read_note());
  IdxHeader h;
  h.magic = big_endian32(buf);
  const std::uint32_t rank = h.magic & 0xFF;
  const bool ok = images ? ((h.magic & 0xFFFFFF00u) == 0x00000800u && rank >= 2)
                         : h.magic == idx_labels_magic;
  if (!ok)
    STRATA_THROW(data, "'", path, "': wrong magic number: expected ", hex32(expected), " (", what,
                 "), found ", hex32(h.magic));
  h.dims.resize(rank);
  for (std::uint32_t d = 0; d < rank; ++d) {
    got = in.read(buf, 4);
    if (got < 4)
      STRATA_THROW(data, "'", path, "' is truncated: expected a ", 4 + 4 * rank,
                   "-byte header, got ", 4 + 4 * d + got, " bytes", in.short_read_note());
    h.dims[d] = big_endian32(buf);
  }
  return h;
}

// Streams exactly n bytes of payload through consume(bytes, count, offset) in
// large chunks; a data error when the file ends early.
template <class Consume>
void read_payload(InputFile& in, const std::string& path, std::size_t n, Consume&& consume) {
  std::vector<unsigned char> buf(std::min(n, std::size_t{1} << 18));
  std::size_t got = 0;
  while (got < n) {
    const std::size_t want = std::min(n - got, buf.size());
    const std::size_t r = in.read(buf.data(), want);
    consume(buf.data(), r, got);
    got += r;
    if (r < want) break;
  }
  if (got < n)
    STRATA_THROW(data, "'", path, "' is truncated: expected ", n, " bytes of data, got ", got,
                 in.short_read_note());
}

// Room for the n values a header announces, up front so that filling does
// not reallocate, but no more than the file can plausibly hold: a corrupt
// header claiming billions of values in a small file costs nothing (the read
// then ends with a "truncated" error), and beyond the bound the vector grows
// with the data that actually arrives. A data error when even that cannot be
// allocated.
template <class T>
void reserve_for(std::vector<T>& v, std::size_t n, const InputFile& in, const std::string& path) {
  try {
    v.reserve(std::min(n, in.plausible_bytes()));
  } catch (const std::exception&) {
    STRATA_THROW(data, "'", path, "': the header claims ", n,
                 " values, more than fits in memory (corrupt file?)");
  }
}

}  // namespace

Dataset read_idx(const std::string& images_path, const std::string& labels_path,
                 std::size_t classes) {
  STRATA_REQUIRE(classes > 0, config, "read_idx: the number of classes must be positive");

  InputFile images(images_path);
  const IdxHeader ih = read_header(images, images_path, true);
  InputFile labels(labels_path);
  const IdxHeader lh = read_header(labels, labels_path, false);

  const std::size_t n = ih.dims[0];
  std::size_t features = 1;
  for (std::size_t d = 1; d < ih.dims.size(); ++d) {
    const std::size_t dim = ih.dims[d];
    STRATA_REQUIRE(dim > 0, data, "'", images_path, "': image dimension ", d, " is zero");
    STRATA_REQUIRE(features <= std::numeric_limits<std::size_t>::max() / dim, data, "'",
                   images_path, "': image dimensions are too large");
    features *= dim;
  }
  STRATA_REQUIRE(n > 0, data, "'", images_path, "' contains no images");
  STRATA_REQUIRE(n <= std::numeric_limits<std::size_t>::max() / features, data, "'",
                 images_path, "': image dimensions are too large");
  if (lh.dims[0] != n)
    STRATA_THROW(data, "image and label counts differ: '", images_path, "' has ", n,
                 " images but '", labels_path, "' has ", lh.dims[0], " labels");

  Dataset out;
  out.name = images_path;
  out.features = features;
  out.classes = classes;
  if (ih.dims.size() == 3) out.shape = {1, ih.dims[1], ih.dims[2]};  // one channel
  else if (ih.dims.size() > 3) out.shape.assign(ih.dims.begin() + 1, ih.dims.end());

  std::array<float, 256> scale;
  for (std::size_t v = 0; v < scale.size(); ++v) scale[v] = static_cast<float>(v) / 255.0f;
  reserve_for(out.x, n * features, images, images_path);
  read_payload(images, images_path, n * features,
               [&](const unsigned char* p, std::size_t count, std::size_t offset) {
                 out.x.resize(offset + count);
                 float* dst = out.x.data() + offset;
                 for (std::size_t i = 0; i < count; ++i) dst[i] = scale[p[i]];
               });

  reserve_for(out.labels, n, labels, labels_path);
  read_payload(labels, labels_path, n,
               [&](const unsigned char* p, std::size_t count, std::size_t offset) {
                 for (std::size_t i = 0; i < count; ++i) {
                   if (p[i] >= classes)
                     STRATA_THROW(data, "'", labels_path, "': label ", unsigned{p[i]},
                                  " at index ", offset + i, " is out of range [0, ", classes,
                                  ")");
                   out.labels.push_back(p[i]);
                 }
               });
  return out;
}

std::string default_fashion_mnist_dir() {
  const char* env = std::getenv("STRATA_FASHION_MNIST_DIR");
  if (env != nullptr && *env != '\0') return env;
  return "/usr/share/datasets/fashion-mnist";
}

namespace {
// dir/base.gz or dir/base (the plain file first when built without zlib); a
// data error when neither exists.
std::string find_idx_file(const std::filesystem::path& dir, const std::string& base) {
  std::error_code ec;
  const bool gz_first = STRATA_HAS_ZLIB;
  for (const std::string& name : {gz_first ? base + ".gz" : base, gz_first ? base : base + ".gz"}) {
    const std::filesystem::path p = dir / name;
    if (std::filesystem::is_regular_file(p, ec)) return p.string();
  }
  STRATA_THROW(data, "Fashion-MNIST file '", base, ".gz' (or '", base, "') not found in '",
               dir.string(), "'");
}
}  // namespace

Split load_fashion_mnist(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    STRATA_THROW(data, "Fashion-MNIST directory '", dir, "' ",
                 std::filesystem::exists(dir, ec) ? "is not a directory" : "does not exist",
                 ": install the data with `apt-get install dataset-fashion-mnist` or point "
                 "--data-dir (or STRATA_FASHION_MNIST_DIR) at a copy");
  Split s;
  s.train = read_idx(find_idx_file(dir, "train-images-idx3-ubyte"),
                     find_idx_file(dir, "train-labels-idx1-ubyte"), 10);
  s.test = read_idx(find_idx_file(dir, "t10k-images-idx3-ubyte"),
                    find_idx_file(dir, "t10k-labels-idx1-ubyte"), 10);
  return s;
}

}  // namespace strata::data
