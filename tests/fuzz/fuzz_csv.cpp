// libFuzzer target: the CSV reader (data::parse_csv, which data::read_csv
// calls with the file's text).
//
// Input: byte 0 picks the task (bit 0: regression), the number of classes
// (bits 1-3; 0 means "max label + 1") or the regression target width (1 +
// bits 1-2); the rest is the CSV text.
#include "fuzz_common.hpp"

#include "data/dataset.hpp"

#include <cmath>

using namespace strata;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const bool regression = data[0] & 1;
  const std::size_t classes = (data[0] >> 1) & 7;
  const std::size_t width = 1 + ((data[0] >> 1) & 3);
  std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  const auto task = regression ? data::CsvTask::regression : data::CsvTask::classification;

  fuzz::expect_only({ErrorKind::data}, [&] {
    const data::Dataset d = data::parse_csv(text, "fuzz.csv", task, classes, width);
    STRATA_FUZZ_CHECK(d.features > 0);
    STRATA_FUZZ_CHECK(d.size() > 0);
    STRATA_FUZZ_CHECK(d.x.size() == d.size() * d.features);
    for (float v : d.x) STRATA_FUZZ_CHECK(std::isfinite(v));
    if (regression) {
      STRATA_FUZZ_CHECK(!d.is_classification());
      STRATA_FUZZ_CHECK(d.target_width == width);
      STRATA_FUZZ_CHECK(d.targets.size() == d.size() * width);
      for (float v : d.targets) STRATA_FUZZ_CHECK(std::isfinite(v));
    } else {
      STRATA_FUZZ_CHECK(d.is_classification());
      STRATA_FUZZ_CHECK(classes == 0 || d.classes == classes);
      STRATA_FUZZ_CHECK(d.labels.size() == d.size());
      for (std::int32_t l : d.labels)
        STRATA_FUZZ_CHECK(l >= 0 && static_cast<std::size_t>(l) < d.classes);
    }
  });
  return 0;
}
