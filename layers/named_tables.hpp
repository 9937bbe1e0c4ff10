// Joining the parameter or buffer tables of a list of layers into one, as a
// model (Sequential) and a block (Block) publish them: each entry's name is
// prefixed with its layer's name ("3.weight", "blocks.0.1.bias") and a
// parameter's offset moved to its layer's first parameter.
#pragma once

#include "layers/layer.hpp"

#include <string>
#include <type_traits>
#include <vector>

namespace strata::detail {

// table(layer) -> std::vector<Info>; offsets[i]: first parameter of layer i.
template <class Info, class T, class Table>
std::vector<Info> joined_tables(const std::vector<LayerPtr<T>>& layers,
                                const std::vector<std::string>& names,
                                const std::vector<std::size_t>& offsets, Table table) {
  std::vector<Info> all;
  for (std::size_t i = 0; i < layers.size(); ++i)
    for (Info entry : table(*layers[i])) {
      entry.name = names[i] + "." + entry.name;
      if constexpr (std::is_same_v<Info, ParamInfo>) entry.offset += offsets[i];
      all.push_back(std::move(entry));
    }
  return all;
}

}  // namespace strata::detail
