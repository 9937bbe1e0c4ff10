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

// The MLP's layers in order. make_linear(k, in, out) makes the k-th Linear
// (tensor parallelism substitutes its sharded layers); dropout layer k (after
// Linear k's activation) draws with seed spec.seed + k.
template <class T, class MakeLinear>
std::vector<LayerPtr<T>> mlp_layers(const MlpSpec& spec, MakeLinear&& make_linear) {
  std::vector<LayerPtr<T>> layers;
  for (std::size_t i = 0; i + 1 < spec.widths.size(); ++i) {
    layers.push_back(make_linear(i, spec.widths[i], spec.widths[i + 1]));
    if (i + 2 < spec.widths.size()) {
      layers.push_back(make_activation<T>(spec.activation));
      if (spec.dropout > 0) layers.push_back(std::make_unique<Dropout<T>>(spec.dropout, spec.seed + i));
    }
  }
  return layers;
}

template <class T>
std::vector<LayerPtr<T>> mlp_layers(const MlpSpec& spec) {
  return mlp_layers<T>(spec, [](std::size_t, std::size_t in, std::size_t out) -> LayerPtr<T> {
    return std::make_unique<Linear<T>>(in, out);
  });
}

template <class T>
Sequential<T> make_mlp(const MlpSpec& spec) {
  Sequential<T> model(spec.widths.at(0));
  for (auto& layer : mlp_layers<T>(spec)) model.add(std::move(layer));
  return model;
}

}  // namespace strata
