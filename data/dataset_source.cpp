#include "data/dataset_source.hpp"

#include "backends/error.hpp"
#include "data/text.hpp"

namespace strata::data {

DatasetSource parse_dataset_source(const std::string& spec) {
  DatasetSource s;
  s.spec = spec;
  auto after = [&](const char* prefix) {
    const std::string p = prefix;
    if (spec.rfind(p, 0) != 0) return false;
    STRATA_REQUIRE(spec.size() > p.size(), config, "--dataset ", p, "PATH needs a path");
    s.path = spec.substr(p.size());
    return true;
  };
  if (spec == "fashion-mnist") s.kind = SourceKind::fashion_mnist;
  else if (spec == "synthetic") s.kind = SourceKind::synthetic;
  else if (spec == "fortunes") s.kind = SourceKind::text, s.path = default_fortunes_dir();
  else if (after("csv:")) s.kind = SourceKind::csv;
  else if (after("text:")) s.kind = SourceKind::text;
  else
    STRATA_THROW(config, "--dataset: unknown data set '", spec,
                 "' (expected fashion-mnist, synthetic, csv:PATH, text:PATH or fortunes)");
  return s;
}

}  // namespace strata::data
