// libFuzzer target: model files (parse_model, then build_model as
// strata-train --model does, without allocating the model).
//
// Input: the file's text. Oracle: either a configuration error, or a model
// whose shapes chain from the declared input and whose parameter tables
// cover every layer's parameters exactly.
#include "fuzz_common.hpp"

#include "layers/registry.hpp"

using namespace strata;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  fuzz::expect_only({ErrorKind::config}, [&] {
    const ModelSpec spec = parse_model(text, "fuzz.toml");
    STRATA_FUZZ_CHECK(spec.input.rank() >= 1 && spec.input.rank() <= 4);
    STRATA_FUZZ_CHECK(!spec.layers.empty());
    Sequential<float> m = build_model<float>(spec, 1);
    STRATA_FUZZ_CHECK(m.shape(0) == spec.input);
    STRATA_FUZZ_CHECK(m.num_layers() >= spec.layers.size());
    std::size_t next = 0;
    for (const auto& p : m.parameters()) {
      STRATA_FUZZ_CHECK(p.offset == next);
      next += p.shape.numel();
    }
    STRATA_FUZZ_CHECK(next == m.num_params());
  });
  return 0;
}
