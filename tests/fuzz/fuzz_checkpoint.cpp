// libFuzzer target: the checkpoint reader (checkpoint::parse, which
// checkpoint::load calls with the file's bytes) on whole checkpoints and
// manifests of sharded ones (whose shards the reader is given the input
// itself for), and the shard reader (checkpoint::parse_shard).
//
// Each input is parsed twice: as given, and with every section's CRC field
// recomputed over the section's payload where the structure allows it, so
// that mutated inputs also reach the code behind the checksum test.
#include "fuzz_common.hpp"

#include "strategies/checkpoint.hpp"

#include <cstring>
#include <vector>

#include <zlib.h>

using namespace strata;

namespace {

// Overwrites the CRC field of each section whose header and payload lie inside
// the buffer (the format of strategies/checkpoint.hpp, version 1).
void fix_crcs(std::vector<std::uint8_t>& b) {
  std::size_t pos = 16;  // magic, version, section count
  if (b.size() < pos) return;
  std::uint32_t count;
  std::memcpy(&count, b.data() + 12, 4);
  for (std::uint32_t i = 0; i < count && i < 64; ++i) {
    std::uint32_t len;
    if (b.size() - pos < 4) return;
    std::memcpy(&len, b.data() + pos, 4);
    pos += 4;
    if (b.size() - pos < std::uint64_t{len} + 12) return;
    pos += len;
    std::uint64_t bytes;
    std::memcpy(&bytes, b.data() + pos, 8);
    const std::size_t crc_at = pos + 8;
    pos += 12;
    if (bytes > b.size() - pos) return;
    const auto crc = static_cast<std::uint32_t>(
        crc32(crc32(0L, Z_NULL, 0), b.data() + pos, static_cast<uInt>(bytes)));
    std::memcpy(b.data() + crc_at, &crc, 4);
    pos += bytes;
  }
}

void check(const std::uint8_t* data, std::size_t size) {
  fuzz::expect_only({ErrorKind::data}, [&] {
    const auto shard_bytes = [&](const std::string&) {
      return std::string(reinterpret_cast<const char*>(data), size);
    };
    const checkpoint::State s = checkpoint::parse(data, size, "fuzz.strata", shard_bytes);
    STRATA_FUZZ_CHECK(!s.config.empty() && !s.state.empty());
    // Every decoded byte came from the input (a manifest's shards are the
    // input again: each value of the model once).
    STRATA_FUZZ_CHECK(s.config.size() + s.state.size() <= size);
    STRATA_FUZZ_CHECK(s.params.size() <= size && s.opt0.size() <= size && s.opt1.size() <= size);
  });
  fuzz::expect_only({ErrorKind::data}, [&] {
    checkpoint::ShardHeader h;
    const checkpoint::Shard s = checkpoint::parse_shard(data, size, "fuzz.strata", &h);
    STRATA_FUZZ_CHECK(16 * s.ranges.size() + 4 * (s.params.size() + s.opt0.size() + s.opt1.size()) <= size);
    std::uint64_t held = 0;
    for (const auto& r : s.ranges) {
      STRATA_FUZZ_CHECK(r.length > 0 && r.offset + r.length <= h.values);
      held += r.length;
    }
    STRATA_FUZZ_CHECK(held == s.params.size() && h.rank < h.ranks);
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  check(data, size);
  std::vector<std::uint8_t> fixed(data, data + size);
  fix_crcs(fixed);
  // A separate allocation of exactly `size` bytes, so that ASan sees reads past the end.
  check(fixed.data(), fixed.size());
  return 0;
}
