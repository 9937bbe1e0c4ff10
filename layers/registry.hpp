// The layer registry: a model description's layer types (models/*.toml,
// layers/model_spec.hpp) mapped to the layers' factories, and the builder
// that turns a description into layers.
//
// Adding a layer type: its header and source (with a static
// `from_args(LayerArgs&, const Shape& in, LayerBuild&)` that reads its
// options), one line in layers/registry.cpp, and its tests.
#pragma once

#include "layers/layer.hpp"
#include "layers/model_spec.hpp"
#include "layers/sequential.hpp"

#include <map>
#include <string>
#include <vector>

namespace strata {

// What factories share while one model is built.
struct LayerBuild {
  std::uint64_t seed = 0;     // the run's seed
  std::size_t dropouts = 0;   // Dropout layers made so far: the k-th draws with seed + k
  std::size_t layers = 0;     // layers made so far (at most kMaxLayers)
  bool sync_batchnorm = false;  // the model's sync_batchnorm (BatchNorm layers)
  bool recompute = false;       // the model's recompute (top-level blocks)
};

template <class T>
using LayerFactory = LayerPtr<T> (*)(LayerArgs& args, const Shape& in, LayerBuild& build);

// Registered types, by name ("linear", "relu", ...). The block types
// "residual" and "block" are the builder's own.
template <class T>
const std::map<std::string, LayerFactory<T>>& layer_registry();
// Every type a model file may name, sorted.
std::vector<std::string> layer_types();

// The top-level layers of a model with their names ("" for a layer named by
// its position).
template <class T>
struct ModelLayers {
  Shape input;
  std::vector<LayerPtr<T>> layers;
  std::vector<std::string> names;
};

// Builds the layers a description names; throws config naming the file,
// the line and the layer for an unknown type, a bad option or shapes that
// do not chain. seed: dropout streams (the same model from the same seed).
template <class T>
ModelLayers<T> build_layers(const ModelSpec& spec, std::uint64_t seed);

// The model of a description as a Sequential (not built).
template <class T>
Sequential<T> build_model(const ModelSpec& spec, std::uint64_t seed);

}  // namespace strata
