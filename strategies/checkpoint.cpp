#include "strategies/checkpoint.hpp"

#include "backends/comm/communicator.hpp"
#include "backends/error.hpp"
#include "strata_config.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string_view>
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

// CRC-32 (IEEE, zlib's) of `n` more bytes after a CRC of `crc` (0: none yet).
std::uint32_t crc32_update(std::uint32_t crc, const void* data, std::size_t n) {
#if STRATA_HAS_ZLIB
  uLong c = crc;
  const auto* p = static_cast<const Bytef*>(data);
  while (n > 0) {  // zlib takes 32-bit lengths
    const uInt chunk = static_cast<uInt>(std::min<std::size_t>(n, 1u << 30));
    c = crc32(c, p, chunk);
    p += chunk;
    n -= chunk;
  }
  return static_cast<std::uint32_t>(c);
#else
  // Bitwise, the same polynomial and conventions as zlib's.
  std::uint32_t c = ~crc;
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
#endif
}

std::uint32_t crc32_of(const void* data, std::size_t n) { return crc32_update(0, data, n); }

// The installed WriteFaults (install_write_faults): the countdown is shared
// by the thread ranks of a process (each file write counts once); the pause
// is installed before any writer runs.
std::atomic<int> g_fail_nth{0};
std::atomic<long> g_pause_ms{0};

// In the middle of writing each checkpoint file (its first sections written,
// the rest not yet).
void pause_for_tests() {
  if (const long ms = g_pause_ms.load(); ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

bool should_fail_write() {
  int n = g_fail_nth.load();
  while (n > 0 && !g_fail_nth.compare_exchange_weak(n, n - 1)) {
  }
  return n == 1;
}

// A file written through a POSIX descriptor so it can be fsync'ed; keeps the
// CRC-32 and size of what it wrote.
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
    crc_ = crc32_update(crc_, data, n);
    bytes_ += n;
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
  std::uint32_t crc() const { return crc_; }
  std::uint64_t bytes() const { return bytes_; }

 private:
  [[noreturn]] void fail(const char* what) {
    const int e = errno;
    STRATA_THROW(runtime, "checkpoint: ", what, " '", path_, "': ", std::strerror(e));
  }
  std::string path_;
  int fd_ = -1;
  std::uint32_t crc_ = 0;
  std::uint64_t bytes_ = 0;
};

void sync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // not all file systems allow it; the rename is still atomic
  ::fsync(fd);
  ::close(fd);
}

// Writes `content` to dir/tmp_name, then renames it to dir/final_name(the
// writer) atomically (fsync, rename, dir fsync). Returns the final name.
std::string write_atomically(const std::string& dir, const std::string& tmp_name,
                             const std::function<void(Writer&)>& content,
                             const std::function<std::string(const Writer&)>& final_name) {
  const std::string tmp = (fs::path(dir) / tmp_name).string();
  std::string name;
  try {
    Writer w(tmp);
    content(w);
    w.close_synced();
    name = final_name(w);
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);  // never leave a partial file behind
    throw;
  }
  const std::string final_path = (fs::path(dir) / name).string();
  if (std::rename(tmp.c_str(), final_path.c_str()) != 0) {
    const int e = errno;
    std::error_code ec;
    fs::remove(tmp, ec);
    STRATA_THROW(runtime, "checkpoint: cannot rename '", tmp, "' to '", final_path, "': ",
                 std::strerror(e));
  }
  sync_dir(dir);
  return name;
}

void write_atomically(const std::string& dir, const std::string& name,
                      const std::function<void(Writer&)>& content) {
  write_atomically(dir, name + ".tmp", content, [&](const Writer&) { return name; });
}

struct Section {
  std::string name;
  const void* data;
  std::size_t bytes;
};

template <class T>
Section floats(const char* name, const std::vector<T>& v) {
  return {name, v.data(), v.size() * sizeof(T)};
}
Section text(const char* name, const std::string& s) { return {name, s.data(), s.size()}; }

// The container: header, then the sections; pauses (for tests) before
// section `pause_before`.
void write_sections(Writer& w, const std::vector<Section>& sections, std::size_t pause_before) {
  w.write(kMagic, sizeof kMagic);
  w.put(kVersion);
  w.put(static_cast<std::uint32_t>(sections.size()));
  for (std::size_t i = 0; i < sections.size(); ++i) {
    const Section& sec = sections[i];
    if (i == pause_before) pause_for_tests();
    w.put(static_cast<std::uint32_t>(sec.name.size()));
    w.write(sec.name.data(), sec.name.size());
    w.put(static_cast<std::uint64_t>(sec.bytes));
    w.put(crc32_of(sec.data, sec.bytes));
    w.write(sec.data, sec.bytes);
  }
}

// Little-endian fields of the binary sections ("shard", "ranges", "shards").
class Packer {
 public:
  template <class T>
  Packer& put(T v) {
    out_.append(reinterpret_cast<const char*>(&v), sizeof v);
    return *this;
  }
  Packer& put(const std::string& s) {
    put(static_cast<std::uint32_t>(s.size()));
    out_ += s;
    return *this;
  }
  const std::string& str() const { return out_; }

 private:
  std::string out_;
};

class Unpacker {
 public:
  Unpacker(std::string_view in, const std::string& file, const char* section)
      : in_(in), file_(file), section_(section) {}
  template <class T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, in_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  std::string get_string(std::size_t most) {
    const auto n = get<std::uint32_t>();
    STRATA_REQUIRE(n <= most, data, "checkpoint '", file_, "': section '", section_,
                   "' is malformed (a name of ", n, " bytes)");
    need(n);
    std::string s(in_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  std::size_t left() const { return in_.size() - pos_; }
  void expect_end() {
    STRATA_REQUIRE(left() == 0, data, "checkpoint '", file_, "': section '", section_,
                   "' is malformed (", left(), " bytes too many)");
  }

 private:
  void need(std::size_t n) {
    STRATA_REQUIRE(n <= left(), data, "checkpoint '", file_, "': section '", section_,
                   "' is malformed (it ends early)");
  }
  std::string_view in_;
  std::size_t pos_ = 0;
  const std::string& file_;
  const char* section_;
};

// A verified file of the container format: its sections, by name.
class Sections {
 public:
  Sections(const void* buffer, std::size_t size_bytes, const std::string& path) : path_(path) {
    const char* const bytes = static_cast<const char*>(buffer);
    std::size_t pos = 0;
    // pos <= size_bytes always holds, so the subtraction cannot wrap (a
    // section size read from the file may be anything up to 2^64 - 1).
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
    STRATA_REQUIRE(version == kVersion, data, "checkpoint '", path, "': format version ",
                   version, " (this Strata reads version ", kVersion, ")");
    take(&count, 4, "the header");
    STRATA_REQUIRE(count <= 64, data, "checkpoint '", path, "': corrupt header (", count,
                   " sections)");
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
      // Names are not under a checksum: a damaged one shows as a required
      // section missing or twice, never as a silently skipped one.
      STRATA_REQUIRE(sections_.emplace(name, std::string_view(payload, size)).second, data,
                     "checkpoint '", path, "': section '", name,
                     "' appears twice (the file is corrupt)");
    }
    STRATA_REQUIRE(pos == size_bytes, data, "checkpoint '", path, "': ", size_bytes - pos,
                   " unexpected bytes after the last section");
  }
  bool has(const char* name) const { return sections_.count(name) > 0; }
  // The sections of a kind of file, in the order it writes them. Unknown
  // ones are skipped (written by a newer minor version).
  void require(std::initializer_list<const char*> names) const {
    for (const char* n : names)
      STRATA_REQUIRE(has(n), data, "checkpoint '", path_, "': section '", n,
                     "' is missing (the file is corrupt)");
  }
  std::string_view operator[](const char* name) const { return sections_.at(name); }
  template <class T>
  std::vector<T> array(const char* name) const {
    const std::string_view p = sections_.at(name);
    STRATA_REQUIRE(p.size() % sizeof(T) == 0, data, "checkpoint '", path_, "': section '", name,
                   "' has a size that is not a whole number of floats");
    std::vector<T> v(p.size() / sizeof(T));
    if (!p.empty()) std::memcpy(v.data(), p.data(), p.size());
    return v;
  }

 private:
  std::string path_;
  std::map<std::string, std::string_view> sections_;
};

char* steps9(char* buf, std::size_t n, std::uint64_t step) {
  std::snprintf(buf, n, "%09llu", static_cast<unsigned long long>(step));
  return buf;
}

std::string shards_dir_name(std::uint64_t step) {
  char b[32];
  return std::string("ckpt-") + steps9(b, sizeof b, step) + ".shards";
}

// dir-relative name of a shard file.
std::string shard_name(std::uint64_t step, std::uint32_t rank, std::uint32_t ranks,
                       std::uint32_t crc) {
  char b[96];
  std::snprintf(b, sizeof b, "/rank-%05u-of-%05u-%08x.strata", rank, ranks, crc);
  return shards_dir_name(step) + b;
}

ShardHeader decode_header(const Sections& s, const std::string& path) {
  Unpacker u(s["shard"], path, "shard");
  ShardHeader h;
  h.step = u.get<std::uint64_t>();
  h.rank = u.get<std::uint32_t>();
  h.ranks = u.get<std::uint32_t>();
  h.values = u.get<std::uint64_t>();
  u.expect_end();
  STRATA_REQUIRE(h.rank < h.ranks, data, "checkpoint '", path, "': section 'shard' is malformed (rank ",
                 h.rank, " of ", h.ranks, ")");
  h.layout.assign(s["layout"]);
  return h;
}

struct ManifestEntry {
  std::string name;
  std::uint64_t bytes = 0;
  std::uint32_t crc = 0;
};

std::string read_file(const std::string& path, int& error) {
  error = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in.good()) {
    error = errno != 0 ? errno : ENOENT;
    return {};
  }
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) error = EIO;
  return bytes;
}

void create_dir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  // Another rank may have created it at the same moment.
  STRATA_REQUIRE(!ec || fs::is_directory(dir), runtime, "checkpoint: cannot create directory '",
                 dir, "': ", ec.message());
}

// The step of "ckpt-<step><suffix>" as this file names them, or false
// (other files are left alone).
bool step_of(const std::string& file, const char* suffix, std::uint64_t& step) {
  static const std::regex pattern("ckpt-([0-9]{9,19})(\\..*)");
  std::smatch m;
  if (!std::regex_match(file, m, pattern) || m[2] != suffix) return false;
  step = std::strtoull(m[1].str().c_str(), nullptr, 10);
  char b[32];
  return m[1] == steps9(b, sizeof b, step);
}

// After the checkpoint of `step` is complete and `latest` names it: keeps
// the newest `keep` checkpoints up to it and removes the others (a manifest
// before its shards), temporary files of killed writers, shard folders
// without a manifest and, in this step's shard folder, every file that its
// manifest does not list (`listed`; null for a whole checkpoint, which has
// no shards). One writer per directory: no other write is in progress.
void tidy(const std::string& dir, std::uint64_t step, int keep,
          const std::vector<std::string>* listed) {
  std::error_code ec;
  std::vector<std::uint64_t> steps;
  std::map<std::uint64_t, fs::path> shard_dirs;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string file = e.path().filename().string();
    std::uint64_t s = 0;
    if (step_of(file, ".strata", s)) steps.push_back(s);
    else if (step_of(file, ".strata.tmp", s)) fs::remove(e.path(), ec);
    else if (step_of(file, ".shards", s)) shard_dirs[s] = e.path();
  }
  std::sort(steps.begin(), steps.end());
  std::set<std::uint64_t> kept;
  const auto upto = std::upper_bound(steps.begin(), steps.end(), step) - steps.begin();
  for (auto i = upto; i > 0 && kept.size() < static_cast<std::size_t>(keep); --i)
    kept.insert(steps[i - 1]);
  for (std::uint64_t s : steps) {
    if (kept.count(s)) continue;
    fs::remove(fs::path(dir) / file_name(s), ec);
    if (shard_dirs.count(s)) fs::remove_all(shard_dirs[s], ec);
    shard_dirs.erase(s);
  }
  for (const auto& [s, path] : shard_dirs) {
    if (s != step) {
      if (!kept.count(s)) fs::remove_all(path, ec);
      continue;
    }
    if (listed == nullptr) {
      fs::remove_all(path, ec);
      continue;
    }
    for (const auto& e : fs::directory_iterator(path, ec)) {
      const std::string name = shards_dir_name(step) + "/" + e.path().filename().string();
      if (std::find(listed->begin(), listed->end(), name) == listed->end())
        fs::remove_all(e.path(), ec);
    }
  }
}

void point_latest(const std::string& dir, std::uint64_t step) {
  write_atomically(dir, "latest", [&](Writer& w) {
    const std::string line = file_name(step) + "\n";
    w.write(line.data(), line.size());
  });
}

}  // namespace

void install_write_faults(const WriteFaults& faults) {
  g_fail_nth = std::max(0, faults.fail_nth);
  g_pause_ms = std::max(0L, faults.pause_ms);
}

std::string file_name(std::uint64_t step) {
  char b[32];
  return std::string("ckpt-") + steps9(b, sizeof b, step) + ".strata";
}

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
  create_dir(dir);
  const std::string name = file_name(step);
  const std::vector<Section> sections = {text("config", s.config), text("state", s.state),
                                         floats("params", s.params), floats("opt0", s.opt0),
                                         floats("opt1", s.opt1)};
  write_atomically(dir, name, [&](Writer& w) { write_sections(w, sections, 3); });
  point_latest(dir, step);
  tidy(dir, step, keep, nullptr);
  return (fs::path(dir) / name).string();
}

std::string save_sharded(comm::Communicator& world, const std::string& dir, std::uint64_t step,
                         const State& s, const std::string& layout, std::uint64_t values,
                         const Shard& mine, int keep) {
  STRATA_REQUIRE(keep >= 1, config, "checkpoint: keep must be at least 1");
  const auto rank = static_cast<std::uint32_t>(world.rank());
  const auto ranks = static_cast<std::uint32_t>(world.size());
  // Rank 0 tidies the directory after the previous checkpoint; nobody
  // writes the next one before it is done.
  world.barrier();
  const std::string sub = shards_dir_name(step);
  create_dir((fs::path(dir) / sub).string());
  sync_dir(dir);
  const std::string header = Packer().put(step).put(rank).put(ranks).put(values).str();
  Packer ranges;
  for (const Range& r : mine.ranges) ranges.put(r.offset).put(r.length);
  const std::vector<Section> sections = {
      text("shard", header),         text("layout", layout),     text("ranges", ranges.str()),
      floats("params", mine.params), floats("opt0", mine.opt0), floats("opt1", mine.opt1)};
  char tmp[64];
  std::snprintf(tmp, sizeof tmp, "rank-%05u-of-%05u.strata.tmp", rank, ranks);
  std::int64_t file[2] = {0, 0};  // bytes, CRC
  write_atomically(
      (fs::path(dir) / sub).string(), tmp, [&](Writer& w) { write_sections(w, sections, 4); },
      [&](const Writer& w) {
        file[0] = static_cast<std::int64_t>(w.bytes());
        file[1] = w.crc();
        return fs::path(shard_name(step, rank, ranks, w.crc())).filename().string();
      });
  // Every shard is complete (fsync'ed and renamed) once this returns.
  std::vector<std::int64_t> files(2 * ranks);
  world.allgather(file, files.data(), 2, comm::DataType::i64);
  const std::string path = (fs::path(dir) / file_name(step)).string();
  if (rank != 0) return path;

  Packer table;
  table.put(step).put(values).put(ranks);
  std::vector<std::string> names;
  for (std::uint32_t r = 0; r < ranks; ++r) {
    const auto bytes = static_cast<std::uint64_t>(files[2 * r]);
    const auto crc = static_cast<std::uint32_t>(files[2 * r + 1]);
    names.push_back(shard_name(step, r, ranks, crc));
    table.put(names.back()).put(bytes).put(crc);
  }
  const std::vector<Section> manifest = {text("config", s.config), text("state", s.state),
                                         text("layout", layout), text("shards", table.str())};
  write_atomically(dir, file_name(step), [&](Writer& w) { write_sections(w, manifest, 3); });
  point_latest(dir, step);
  tidy(dir, step, keep, &names);
  return path;
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
  int error = 0;
  const std::string bytes = read_file(path, error);
  STRATA_REQUIRE(error != ENOENT && error != EACCES, data, "checkpoint '", path,
                 "': cannot open (", std::strerror(error), ")");
  STRATA_REQUIRE(error == 0, data, "checkpoint '", path, "': read failed");
  const fs::path folder = fs::path(path).parent_path();
  return parse(bytes.data(), bytes.size(), path, [&](const std::string& name) {
    const std::string shard = (folder / name).string();
    int e = 0;
    std::string b = read_file(shard, e);
    STRATA_REQUIRE(e != ENOENT, data, "checkpoint '", path, "': shard file '", shard,
                   "' is missing");
    STRATA_REQUIRE(e == 0, data, "checkpoint '", path, "': shard file '", shard,
                   "' cannot be read (", std::strerror(e), ")");
    return b;
  });
}

Shard parse_shard(const void* data, std::size_t size, const std::string& path,
                  ShardHeader* header) {
  const Sections s(data, size, path);
  s.require({"shard", "layout", "ranges", "params", "opt0", "opt1"});
  const ShardHeader h = decode_header(s, path);
  Shard out;
  out.params = s.array<float>("params");
  out.opt0 = s.array<float>("opt0");
  out.opt1 = s.array<float>("opt1");
  Unpacker u(s["ranges"], path, "ranges");
  std::uint64_t total = 0;
  while (u.left() > 0) {
    Range r;
    r.offset = u.get<std::uint64_t>();
    r.length = u.get<std::uint64_t>();
    STRATA_REQUIRE(r.length > 0 && r.offset <= h.values && r.length <= h.values - r.offset, data,
                   "checkpoint '", path, "': section 'ranges' is malformed (range of ", r.length,
                   " values at ", r.offset, " in a model of ", h.values, ")");
    total += r.length;  // no overflow: each range lies in [0, values), total <= params below
    STRATA_REQUIRE(total <= out.params.size(), data, "checkpoint '", path, "': its ranges hold more "
                   "values than its ", out.params.size(), " parameters");
    out.ranges.push_back(r);
  }
  STRATA_REQUIRE(total == out.params.size(), data, "checkpoint '", path, "': its ranges hold ",
                 total, " values but it has ", out.params.size(), " parameters");
  for (const auto* opt : {&out.opt0, &out.opt1})
    STRATA_REQUIRE(opt->empty() || opt->size() == out.params.size(), data, "checkpoint '", path,
                   "': ", opt->size(), " values of optimizer state for ", out.params.size(),
                   " parameters");
  if (header) *header = h;
  return out;
}

namespace {

// The whole model from the shards a manifest lists. Every shard is read and
// verified before the model is allocated, so the sizes a corrupt manifest
// claims cost no memory.
void assemble(const Sections& s, State& st, const std::string& path, const ReadShard& read) {
  Unpacker u(s["shards"], path, "shards");
  const auto step = u.get<std::uint64_t>();
  const auto values = u.get<std::uint64_t>();
  const auto count = u.get<std::uint32_t>();
  STRATA_REQUIRE(count >= 1 && count <= u.left() / 16, data, "checkpoint '", path,
                 "': section 'shards' is malformed (", count, " shards)");
  std::vector<ManifestEntry> entries(count);
  for (std::uint32_t r = 0; r < count; ++r) {
    ManifestEntry& e = entries[r];
    e.name = u.get_string(128);
    e.bytes = u.get<std::uint64_t>();
    e.crc = u.get<std::uint32_t>();
    // Names are derived, never taken as given (no path leaves the folder).
    STRATA_REQUIRE(e.name == shard_name(step, r, count, e.crc), data, "checkpoint '", path,
                   "': section 'shards' is malformed (shard ", r, " is named '", e.name, "')");
  }
  u.expect_end();
  STRATA_REQUIRE(read, data, "checkpoint '", path, "': the manifest of a sharded checkpoint; its "
                 "shards are files next to it (read it with checkpoint::load)");
  const std::string layout(s["layout"]);
  const fs::path folder = fs::path(path).parent_path();
  std::vector<std::string> names(count);
  std::vector<Shard> shards(count);
  struct Piece {
    std::uint64_t offset, length;
    std::uint32_t shard;
  };
  std::vector<Piece> pieces;
  int has_opt[2] = {-1, -1};  // unknown, no, yes
  std::uint32_t opt_from[2] = {0, 0};
  for (std::uint32_t r = 0; r < count; ++r) {
    const ManifestEntry& e = entries[r];
    names[r] = (folder / e.name).string();
    const std::string& file = names[r];
    const std::string bytes = read(e.name);
    STRATA_REQUIRE(bytes.size() == e.bytes, data, "checkpoint '", path, "': shard file '", file,
                   "' has ", bytes.size(), " bytes but the manifest records ", e.bytes,
                   " (truncated or replaced)");
    STRATA_REQUIRE(crc32_of(bytes.data(), bytes.size()) == e.crc, data, "checkpoint '", path,
                   "': shard file '", file, "' fails the manifest's checksum (the file is corrupt)");
    ShardHeader h;
    Shard& sh = shards[r];
    sh = parse_shard(bytes.data(), bytes.size(), file, &h);
    STRATA_REQUIRE(h.step == step && h.rank == r && h.ranks == count && h.values == values &&
                       h.layout == layout,
                   data, "checkpoint '", path, "': shard file '", file, "' is rank ", h.rank,
                   " of ", h.ranks, " of step ", h.step, " (", h.values, " values, ", h.layout,
                   ") but the manifest lists it as rank ", r, " of ", count, " of step ", step,
                   " (", values, " values, ", layout, ")");
    const std::vector<float>* opt[2] = {&sh.opt0, &sh.opt1};
    for (int k = 0; k < 2 && !sh.params.empty(); ++k) {
      const int has = opt[k]->empty() ? 0 : 1;
      if (has_opt[k] < 0) {
        has_opt[k] = has;
        opt_from[k] = r;
      }
      STRATA_REQUIRE(has == has_opt[k], data, "checkpoint '", path, "': shard file '", file,
                     "' ", has ? "has" : "lacks", " optimizer state ", k, " that shard file '",
                     names[opt_from[k]], "' ", has ? "lacks" : "has");
    }
    for (const Range& g : sh.ranges) pieces.push_back({g.offset, g.length, r});
  }
  // The shards must cover [0, values) exactly once.
  std::sort(pieces.begin(), pieces.end(),
            [](const Piece& a, const Piece& b) { return a.offset < b.offset; });
  std::uint64_t next = 0;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const Piece& p = pieces[i];
    STRATA_REQUIRE(p.offset >= next, data, "checkpoint '", path, "': shard files '",
                   names[pieces[i - 1].shard], "' and '", names[p.shard],
                   "' both hold values from ", p.offset, " on (the shards do not belong together)");
    STRATA_REQUIRE(p.offset == next, data, "checkpoint '", path, "': values [", next, ", ",
                   p.offset, ") of the model are in no shard (the shards do not belong together)");
    next = p.offset + p.length;
  }
  STRATA_REQUIRE(next == values, data, "checkpoint '", path, "': values [", next, ", ", values,
                 ") of the model are in no shard (the shards do not belong together)");
  // Covered exactly once: `values` floats were read, the allocation is safe.
  st.params.assign(values, 0.0f);
  if (has_opt[0] == 1) st.opt0.assign(values, 0.0f);
  if (has_opt[1] == 1) st.opt1.assign(values, 0.0f);
  for (Shard& sh : shards) {
    std::size_t at = 0;
    for (const Range& g : sh.ranges) {
      std::copy_n(sh.params.begin() + at, g.length, st.params.begin() + g.offset);
      if (!sh.opt0.empty()) std::copy_n(sh.opt0.begin() + at, g.length, st.opt0.begin() + g.offset);
      if (!sh.opt1.empty()) std::copy_n(sh.opt1.begin() + at, g.length, st.opt1.begin() + g.offset);
      at += g.length;
    }
    sh = Shard();  // freed as it goes
  }
}

}  // namespace

State parse(const void* buffer, std::size_t size, const std::string& path, const ReadShard& read) {
  const Sections s(buffer, size, path);
  if (s.has("shard") && !s.has("shards")) {
    s.require({"shard", "layout"});
    const ShardHeader h = decode_header(s, path);
    STRATA_THROW(data, "checkpoint '", path, "': one rank's shard of a sharded checkpoint, not a "
                 "checkpoint (resume from its manifest ", file_name(h.step), ")");
  }
  const bool manifest = s.has("shards");
  if (manifest) s.require({"config", "state", "layout", "shards"});
  else s.require({"config", "state", "params", "opt0", "opt1"});
  State st;
  st.config.assign(s["config"]);
  st.state.assign(s["state"]);
  STRATA_REQUIRE(!st.config.empty() && !st.state.empty(), data, "checkpoint '", path,
                 "': the config or state section is empty");
  if (manifest) {
    assemble(s, st, path, read);
  } else {
    st.params = s.array<float>("params");
    st.opt0 = s.array<float>("opt0");
    st.opt1 = s.array<float>("opt1");
  }
  return st;
}

}  // namespace strata::checkpoint
