#include "strategies/checkpoint.hpp"

#include "backends/error.hpp"
#include "strata_config.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <thread>

#include <fcntl.h>
#include <unistd.h>

#if STRATA_HAS_ZLIB
#include <zlib.h>
#endif

namespace strata::checkpoint {
namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'C', 'K'};
constexpr std::uint32_t kVersion = 1;

std::uint32_t crc32_of(const void* data, std::size_t n) {
#if STRATA_HAS_ZLIB
  uLong c = crc32(0L, Z_NULL, 0);
  const auto* p = static_cast<const Bytef*>(data);
  while (n > 0) {  // zlib takes 32-bit lengths
    const uInt chunk = static_cast<uInt>(std::min<std::size_t>(n, 1u << 30));
    c = crc32(c, p, chunk);
    p += chunk;
    n -= chunk;
  }
  return static_cast<std::uint32_t>(c);
#else
  // Bitwise CRC-32 (IEEE), the same polynomial as zlib's.
  std::uint32_t c = 0xFFFFFFFFu;
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
#endif
}

int g_fail_nth = -1;  // -1: read the environment on first use

// For tests that kill a process while it writes a checkpoint:
// STRATA_CHECKPOINT_WRITE_DELAY_MS=N pauses N ms in the middle of writing each
// checkpoint file (its first sections written, the rest not yet).
void delay_for_tests() {
  static const long ms = [] {
    const char* e = std::getenv("STRATA_CHECKPOINT_WRITE_DELAY_MS");
    return e ? std::max(0L, std::atol(e)) : 0L;
  }();
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

bool should_fail_write() {
  if (g_fail_nth < 0) {
    const char* e = std::getenv("STRATA_FAIL_CHECKPOINT_WRITE");
    g_fail_nth = e ? std::atoi(e) : 0;
  }
  if (g_fail_nth == 0) return false;
  return --g_fail_nth == 0;
}

// A file written through a POSIX descriptor so it can be fsync'ed.
class Writer {
 public:
  explicit Writer(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot create");
  }
  ~Writer() {
    if (fd_ >= 0) ::close(fd_);
  }
  void write(const void* data, std::size_t n) {
    const auto* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, std::min<std::size_t>(n, 1u << 30));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) fail("write failed");
      p += w;
      n -= static_cast<std::size_t>(w);
    }
  }
  template <class T>
  void put(const T& v) { write(&v, sizeof v); }
  void close_synced() {
    if (should_fail_write()) {
      errno = ENOSPC;
      fail("write failed (injected)");
    }
    if (::fsync(fd_) != 0) fail("fsync failed");
    if (::close(fd_) != 0) {
      fd_ = -1;
      fail("close failed");
    }
    fd_ = -1;
  }

 private:
  [[noreturn]] void fail(const char* what) {
    const int e = errno;
    STRATA_THROW(runtime, "checkpoint: ", what, " '", path_, "': ", std::strerror(e));
  }
  std::string path_;
  int fd_ = -1;
};

void sync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // not all file systems allow it; the rename is still atomic
  ::fsync(fd);
  ::close(fd);
}

// Writes `content` to `path` atomically (temporary file, fsync, rename, dir fsync).
void write_atomically(const std::string& dir, const std::string& name,
                      const std::function<void(Writer&)>& content) {
  const std::string final_path = (fs::path(dir) / name).string();
  const std::string tmp = final_path + ".tmp";
  try {
    Writer w(tmp);
    content(w);
    w.close_synced();
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);  // never leave a partial file behind
    throw;
  }
  if (std::rename(tmp.c_str(), final_path.c_str()) != 0) {
    const int e = errno;
    std::error_code ec;
    fs::remove(tmp, ec);
    STRATA_THROW(runtime, "checkpoint: cannot rename '", tmp, "' to '", final_path, "': ",
                 std::strerror(e));
  }
  sync_dir(dir);
}

struct Section {
  std::string name;
  const void* data;
  std::size_t bytes;
};

}  // namespace

void inject_write_failure(int nth) { g_fail_nth = nth; }

namespace {
void create_dir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  STRATA_REQUIRE(!ec, runtime, "checkpoint: cannot create directory '", dir, "': ", ec.message());
}
}  // namespace

void prepare_dir(const std::string& dir) {
  create_dir(dir);
  const std::string probe = (fs::path(dir) / (".strata-write-test-" + std::to_string(::getpid()))).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int e = errno;
    STRATA_THROW(runtime, "checkpoint: cannot create files in '", dir, "': ", std::strerror(e));
  }
  ::close(fd);
  ::unlink(probe.c_str());
}

std::string save(const std::string& dir, std::uint64_t step, const State& s, int keep) {
  STRATA_REQUIRE(keep >= 1, config, "checkpoint: keep must be at least 1");
  std::error_code ec;
  create_dir(dir);
  char name[64];
  std::snprintf(name, sizeof name, "ckpt-%09llu.strata", static_cast<unsigned long long>(step));
  const std::vector<Section> sections = {
      {"config", s.config.data(), s.config.size()},
      {"state", s.state.data(), s.state.size()},
      {"params", s.params.data(), s.params.size() * sizeof(float)},
      {"opt0", s.opt0.data(), s.opt0.size() * sizeof(float)},
      {"opt1", s.opt1.data(), s.opt1.size() * sizeof(float)},
  };
  write_atomically(dir, name, [&](Writer& w) {
    w.write(kMagic, sizeof kMagic);
    w.put(kVersion);
    w.put(static_cast<std::uint32_t>(sections.size()));
    for (const auto& sec : sections) {
      if (sec.name == "opt0") delay_for_tests();
      w.put(static_cast<std::uint32_t>(sec.name.size()));
      w.write(sec.name.data(), sec.name.size());
      w.put(static_cast<std::uint64_t>(sec.bytes));
      w.put(crc32_of(sec.data, sec.bytes));
      w.write(sec.data, sec.bytes);
    }
  });
  write_atomically(dir, "latest", [&](Writer& w) {
    const std::string line = std::string(name) + "\n";
    w.write(line.data(), line.size());
  });
  // Remove checkpoints beyond the newest `keep` (names sort by step), and the
  // temporary files of writes that a killed process left behind (one writer
  // per directory: none is in progress now).
  std::vector<std::string> all;
  static const std::regex pattern("ckpt-[0-9]+\\.strata"), stale("ckpt-[0-9]+\\.strata\\.tmp");
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string file = e.path().filename().string();
    if (std::regex_match(file, pattern)) all.push_back(e.path().string());
    else if (std::regex_match(file, stale)) fs::remove(e.path(), ec);
  }
  std::sort(all.begin(), all.end());
  for (std::size_t i = 0; i + keep < all.size(); ++i) fs::remove(all[i], ec);
  return (fs::path(dir) / name).string();
}

std::string latest(const std::string& dir) {
  const std::string pointer = (fs::path(dir) / "latest").string();
  std::ifstream in(pointer);
  STRATA_REQUIRE(in.good(), data, "checkpoint: no checkpoint to resume from in '", dir,
                 "' (missing '", pointer, "')");
  std::string name;
  std::getline(in, name);
  STRATA_REQUIRE(!name.empty() && name.find('/') == std::string::npos, data, "checkpoint: '",
                 pointer, "' does not name a checkpoint file");
  return (fs::path(dir) / name).string();
}

State load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  STRATA_REQUIRE(in.good(), data, "checkpoint '", path, "': cannot open");
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  STRATA_REQUIRE(!in.bad(), data, "checkpoint '", path, "': read failed");
  return parse(bytes.data(), bytes.size(), path);
}

State parse(const void* buffer, std::size_t size_bytes, const std::string& path) {
  const char* const bytes = static_cast<const char*>(buffer);
  std::size_t pos = 0;
  // pos <= size_bytes always holds, so the subtraction cannot wrap (a section
  // size read from the file may be anything up to 2^64 - 1).
  auto need = [&](std::uint64_t n, const char* what) {
    STRATA_REQUIRE(n <= size_bytes - pos, data, "checkpoint '", path, "': truncated (", what,
                   " needs ", n, " bytes at offset ", pos, ", the file has ", size_bytes, ")");
  };
  auto take = [&](void* out, std::size_t n, const char* what) {
    need(n, what);
    std::memcpy(out, bytes + pos, n);
    pos += n;
  };
  char magic[8];
  take(magic, 8, "the header");
  STRATA_REQUIRE(std::memcmp(magic, kMagic, 8) == 0, data, "checkpoint '", path,
                 "': not a Strata checkpoint (bad magic)");
  std::uint32_t version = 0, count = 0;
  take(&version, 4, "the header");
  STRATA_REQUIRE(version == kVersion, data, "checkpoint '", path, "': format version ", version,
                 " (this Strata reads version ", kVersion, ")");
  take(&count, 4, "the header");
  STRATA_REQUIRE(count <= 64, data, "checkpoint '", path, "': corrupt header (", count,
                 " sections)");
  State s;
  // The sections every writer of this version writes. Their names are not
  // under a checksum: a damaged name shows as a required section missing (or
  // twice), never as a silently skipped one.
  const char* const required[] = {"config", "state", "params", "opt0", "opt1"};
  bool seen[5] = {false, false, false, false, false};
  for (std::uint32_t i = 0; i < count; ++i) {
    std::uint32_t len = 0;
    take(&len, 4, "a section header");
    STRATA_REQUIRE(len <= 64, data, "checkpoint '", path, "': corrupt section header");
    std::string name(len, '\0');
    take(name.data(), len, "a section name");
    std::uint64_t size = 0;
    std::uint32_t crc = 0;
    take(&size, 8, "a section header");
    take(&crc, 4, "a section header");
    need(size, ("section '" + name + "'").c_str());
    const char* payload = bytes + pos;
    STRATA_REQUIRE(crc32_of(payload, size) == crc, data, "checkpoint '", path, "': section '",
                   name, "' fails its checksum (the file is corrupt)");
    pos += size;
    auto floats = [&](std::vector<float>& v) {
      STRATA_REQUIRE(size % sizeof(float) == 0, data, "checkpoint '", path, "': section '",
                     name, "' has a size that is not a whole number of floats");
      v.resize(size / sizeof(float));
      if (size > 0) std::memcpy(v.data(), payload, size);
    };
    for (int r = 0; r < 5; ++r) {
      if (name != required[r]) continue;
      STRATA_REQUIRE(!seen[r], data, "checkpoint '", path, "': section '", name,
                     "' appears twice (the file is corrupt)");
      seen[r] = true;
    }
    if (name == "config") s.config.assign(payload, size);
    else if (name == "state") s.state.assign(payload, size);
    else if (name == "params") floats(s.params);
    else if (name == "opt0") floats(s.opt0);
    else if (name == "opt1") floats(s.opt1);
    // Unknown sections are skipped (written by a newer minor version).
  }
  STRATA_REQUIRE(pos == size_bytes, data, "checkpoint '", path, "': ", size_bytes - pos,
                 " unexpected bytes after the last section");
  for (int r = 0; r < 5; ++r)
    STRATA_REQUIRE(seen[r], data, "checkpoint '", path, "': section '", required[r],
                   "' is missing (the file is corrupt)");
  STRATA_REQUIRE(!s.config.empty() && !s.state.empty(), data, "checkpoint '", path,
                 "': the config or state section is empty");
  return s;
}

}  // namespace strata::checkpoint
