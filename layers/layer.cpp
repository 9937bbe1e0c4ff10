#include "layers/layer.hpp"

#include "backends/error.hpp"

#include <algorithm>

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

}  // namespace strata
