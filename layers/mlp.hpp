// The multi-layer perceptrons used throughout Strata (--layers):
// Linear(w0, w1) - act - [Dropout] - Linear(w1, w2) - act - ... - Linear(w_{n-2}, w_{n-1}).
// An MLP is a model description like any model file's (mlp_model in
// layers/model_spec.hpp): the same layers, names and initialisation.
#pragma once

#include "layers/activation.hpp"
#include "layers/dropout.hpp"
#include "layers/linear.hpp"
#include "layers/model_spec.hpp"
#include "layers/registry.hpp"
#include "layers/sequential.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace strata {

struct MlpSpec {
  std::vector<std::size_t> widths;  // at least two: input width ... output width
  ActivationKind activation = ActivationKind::relu;
  double dropout = 0.0;  // after each hidden activation when > 0
  std::uint64_t seed = 0;  // dropout masks: Dropout k draws with seed + k
};

// Parses "784,256,128,10"; throws config naming the offending text.
std::vector<std::size_t> parse_widths(const std::string& text);

template <class T>
Sequential<T> make_mlp(const MlpSpec& spec) {
  return build_model<T>(mlp_model(spec), spec.seed);
}

}  // namespace strata
