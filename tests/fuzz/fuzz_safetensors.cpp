// libFuzzer target: the safetensors reader (safetensors::parse). The input is
// the file's bytes. A file either parses or is refused with a data error;
// one that parses keeps its promises: every tensor's bytes match its shape
// and dtype, the values convert, and writing it again gives a file that
// parses to the same tensors.
#include "fuzz_common.hpp"

#include "data/safetensors.hpp"

using namespace strata;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  fuzz::expect_only({ErrorKind::data}, [&] {
    const safetensors::File f = safetensors::parse(bytes, "fuzz");
    std::size_t total = 0;
    for (const auto& t : f.tensors) {
      STRATA_FUZZ_CHECK(t.bytes.size() == t.numel() * safetensors::size_of(t.dtype));
      STRATA_FUZZ_CHECK(t.to_double().size() == t.numel());
      total += t.bytes.size();
    }
    STRATA_FUZZ_CHECK(total <= size);
    const safetensors::File again = safetensors::parse(safetensors::serialize(f), "fuzz again");
    STRATA_FUZZ_CHECK(again.metadata == f.metadata);
    STRATA_FUZZ_CHECK(again.tensors.size() == f.tensors.size());
    for (std::size_t i = 0; i < f.tensors.size(); ++i) {
      STRATA_FUZZ_CHECK(again.tensors[i].name == f.tensors[i].name);
      STRATA_FUZZ_CHECK(again.tensors[i].shape == f.tensors[i].shape);
      STRATA_FUZZ_CHECK(again.tensors[i].bytes == f.tensors[i].bytes);
    }
  });
  return 0;
}
