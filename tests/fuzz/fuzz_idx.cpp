// libFuzzer target: the IDX reader (data::read_idx), images and labels, plain
// or gzip-compressed (zlib detects gzip by its magic bytes, as for real files).
//
// Input: byte 0 picks the number of classes (1 + byte % 16); bytes 1-4 (little
// endian) give the length of the image file; the image file's bytes follow,
// then the label file's bytes (everything left).
#include "fuzz_common.hpp"

#include "data/dataset.hpp"

#include <cmath>
#include <cstring>

using namespace strata;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static fuzz::MemFile images("strata-fuzz-images"), labels("strata-fuzz-labels");
  if (size < 5) return 0;
  const std::size_t classes = 1 + data[0] % 16;
  std::uint32_t image_bytes = 0;
  for (int i = 0; i < 4; ++i) image_bytes |= std::uint32_t{data[1 + i]} << (8 * i);
  data += 5;
  size -= 5;
  const std::size_t split = std::min<std::size_t>(image_bytes, size);
  const std::string& ip = images.set(data, split);
  const std::string& lp = labels.set(data + split, size - split);

  fuzz::expect_only({ErrorKind::data}, [&] {
    const data::Dataset d = data::read_idx(ip, lp, classes);
    // What a successful read promises.
    STRATA_FUZZ_CHECK(d.features > 0);
    STRATA_FUZZ_CHECK(d.size() > 0);
    STRATA_FUZZ_CHECK(d.x.size() == d.size() * d.features);
    STRATA_FUZZ_CHECK(d.labels.size() == d.size());
    STRATA_FUZZ_CHECK(d.classes == classes);
    for (std::int32_t l : d.labels) STRATA_FUZZ_CHECK(l >= 0 && static_cast<std::size_t>(l) < classes);
    for (float v : d.x) STRATA_FUZZ_CHECK(v >= 0.0f && v <= 1.0f);
  });
  return 0;
}
