// Builds the multi-layer perceptrons used throughout Strata:
// Linear(w0, w1) - act - [Dropout] - Linear(w1, w2) - act - ... - Linear(w_{n-2}, w_{n-1}).
#pragma once

#include "layers/activation.hpp"
#include "layers/dropout.hpp"
#include "layers/linear.hpp"
#include "layers/sequential.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace strata {

struct MlpSpec {
  std::vector<std::size_t> widths;  // at least two: input width ... output width
  ActivationKind activation = ActivationKind::relu;
  double dropout = 0.0;  // after each hidden activation when > 0
  std::uint64_t seed = 0;  // dropout masks
};

// Parses "784,256,128,10"; throws config naming the offending text.
std::vector<std::size_t> parse_widths(const std::string& text);

template <class T>
Sequential<T> make_mlp(const MlpSpec& spec) {
  Sequential<T> model(spec.widths.at(0));
  for (std::size_t i = 0; i + 1 < spec.widths.size(); ++i) {
    model.add(std::make_unique<Linear<T>>(spec.widths[i], spec.widths[i + 1]));
    if (i + 2 < spec.widths.size()) {
      model.add(make_activation<T>(spec.activation));
      if (spec.dropout > 0) model.add(std::make_unique<Dropout<T>>(spec.dropout, spec.seed + i));
    }
  }
  return model;
}

}  // namespace strata
