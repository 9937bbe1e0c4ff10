#include "layers/mlp.hpp"

#include "backends/error.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

namespace strata {

std::vector<std::size_t> parse_widths(const std::string& text) {
  std::vector<std::size_t> widths;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find(',', start), text.size());
    const std::string field = text.substr(start, end - start);
    char* stop = nullptr;
    errno = 0;
    const long long v = std::strtoll(field.c_str(), &stop, 10);
    STRATA_REQUIRE(!field.empty() && stop && *stop == '\0' && errno == 0 && v > 0, config,
                   "layer widths '", text, "': '", field, "' is not a positive integer");
    widths.push_back(static_cast<std::size_t>(v));
    start = end + 1;
  }
  STRATA_REQUIRE(widths.size() >= 2, config, "layer widths '", text,
                 "': need at least an input and an output width, e.g. 784,256,10");
  return widths;
}

ModelSpec mlp_model(const MlpSpec& spec) {
  STRATA_REQUIRE(spec.widths.size() >= 2, config,
                 "an MLP needs at least an input and an output width");
  ModelSpec m;
  m.mlp = true;
  m.source = "--layers";
  for (std::size_t i = 0; i < spec.widths.size(); ++i)
    m.source += (i ? "," : " ") + std::to_string(spec.widths[i]);
  m.input = Shape{spec.widths[0]};
  auto layer = [&](const std::string& type) {
    LayerSpec s;
    s.type = type;
    s.args = LayerArgs(m.source, type);
    return s;
  };
  for (std::size_t i = 0; i + 1 < spec.widths.size(); ++i) {
    LayerSpec linear = layer("linear");
    linear.args.set("out", static_cast<std::int64_t>(spec.widths[i + 1]));
    m.layers.push_back(linear);
    if (i + 2 < spec.widths.size()) {
      m.layers.push_back(layer(to_string(spec.activation)));
      if (spec.dropout > 0) {
        LayerSpec d = layer("dropout");
        d.args.set("p", spec.dropout);
        m.layers.push_back(d);
      }
    }
  }
  return m;
}

}  // namespace strata
