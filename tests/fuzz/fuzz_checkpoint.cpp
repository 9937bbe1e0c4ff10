// libFuzzer target: the checkpoint reader (checkpoint::parse, which
// checkpoint::load calls with the file's bytes).
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
    const checkpoint::State s = checkpoint::parse(data, size, "fuzz.strata");
    STRATA_FUZZ_CHECK(!s.config.empty() && !s.state.empty());
    // Every decoded byte came from the input.
    STRATA_FUZZ_CHECK(s.config.size() + s.state.size() +
                          4 * (s.params.size() + s.opt0.size() + s.opt1.size()) <= size);
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
