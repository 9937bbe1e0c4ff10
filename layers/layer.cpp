#include "layers/layer.hpp"

#include "backends/error.hpp"
#include "layers/mlp.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

namespace strata {

Init parse_init(const std::string& name) {
  for (Init i : {Init::kaiming_uniform, Init::kaiming_normal, Init::xavier_uniform,
                 Init::xavier_normal, Init::torch_default})
    if (name == to_string(i)) return i;
  STRATA_THROW(config, "unknown initialisation '", name,
               "' (expected kaiming-uniform, kaiming-normal, xavier-uniform, xavier-normal "
               "or torch-default)");
}

const char* to_string(Init init) {
  switch (init) {
    case Init::kaiming_uniform: return "kaiming-uniform";
    case Init::kaiming_normal: return "kaiming-normal";
    case Init::xavier_uniform: return "xavier-uniform";
    case Init::xavier_normal: return "xavier-normal";
    case Init::torch_default: return "torch-default";
  }
  return "?";
}

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

}  // namespace strata
