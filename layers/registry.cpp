#include "layers/registry.hpp"

#include "backends/error.hpp"
#include "layers/activation.hpp"
#include "layers/attention.hpp"
#include "layers/batchnorm.hpp"
#include "layers/block.hpp"
#include "layers/conv2d.hpp"
#include "layers/dropout.hpp"
#include "layers/embedding.hpp"
#include "layers/flatten.hpp"
#include "layers/layernorm.hpp"
#include "layers/linear.hpp"
#include "layers/pool2d.hpp"
#include "layers/position_embedding.hpp"

#include <algorithm>

namespace strata {

template <class T>
const std::map<std::string, LayerFactory<T>>& layer_registry() {
  static const std::map<std::string, LayerFactory<T>> registry{
      {"linear", &Linear<T>::from_args},
      {"embedding", &Embedding<T>::from_args},
      {"position_embedding", &PositionEmbedding<T>::from_args},
      {"attention", &make_attention<T>},
      {"layernorm", &LayerNorm<T>::from_args},
      {"batchnorm", &BatchNorm<T>::from_args},
      {"conv2d", &Conv2d<T>::from_args},
      {"maxpool2d", &Pool2d<T>::template from_args<PoolKind::max>},
      {"avgpool2d", &Pool2d<T>::template from_args<PoolKind::avg>},
      {"global_avgpool", &Pool2d<T>::template from_args<PoolKind::global_avg>},
      {"flatten", &Flatten<T>::from_args},
      {"dropout", &Dropout<T>::from_args},
      {"relu", &Activation<T>::template from_args<ActivationKind::relu>},
      {"gelu", &Activation<T>::template from_args<ActivationKind::gelu>},
      {"tanh", &Activation<T>::template from_args<ActivationKind::tanh>},
      {"sigmoid", &Activation<T>::template from_args<ActivationKind::sigmoid>},
  };
  return registry;
}

std::vector<std::string> layer_types() {
  std::vector<std::string> types{"block", "residual"};
  for (const auto& entry : layer_registry<float>()) types.push_back(entry.first);
  std::sort(types.begin(), types.end());
  return types;
}

namespace {

std::string known_types() {
  std::string s;
  for (const auto& t : layer_types()) s += (s.empty() ? "" : ", ") + t;
  return s;
}

template <class T>
void expand(const std::vector<LayerSpec>& specs, Shape& shape, LayerBuild& build,
            std::vector<LayerPtr<T>>& layers, std::vector<std::string>& names,
            bool positional_names);

// top: a top-level layer of the model (not inside a block).
template <class T>
LayerPtr<T> build_one(const LayerSpec& s, const Shape& in, LayerBuild& build, bool top) {
  STRATA_REQUIRE(++build.layers <= kMaxLayers, config, s.args.where(), ": the model has more than ",
                 kMaxLayers, " layers (repeats multiply)");
  LayerArgs args = s.args;
  LayerPtr<T> layer;
  if (s.type == "residual" || s.type == "block") {
    std::vector<LayerPtr<T>> inner;
    std::vector<std::string> names;
    Shape shape = in;
    expand<T>(s.layers, shape, build, inner, names, true);
    const bool recompute = args.flag("recompute", false) || (top && build.recompute);
    STRATA_REQUIRE(!recompute || top, config, args.at("recompute"),
                   ": only a top-level block recomputes (it recomputes the blocks inside it)");
    args.finish();
    layer = std::make_unique<Block<T>>(std::move(inner), s.type == "residual", std::move(names));
    set_recompute(*layer, recompute);
  } else {
    const auto& registry = layer_registry<T>();
    const auto it = registry.find(s.type);
    STRATA_REQUIRE(it != registry.end(), config, args.where(), ": unknown layer type '", s.type,
                   "' (known: ", known_types(), ")");
    layer = it->second(args, in, build);
    args.finish();
  }
  return layer;
}

template <class T>
void expand(const std::vector<LayerSpec>& specs, Shape& shape, LayerBuild& build,
            std::vector<LayerPtr<T>>& layers, std::vector<std::string>& names,
            bool positional_names) {
  for (const auto& s : specs)
    for (std::size_t r = 0; r < s.repeat; ++r) {
      LayerPtr<T> layer;
      try {
        layer = build_one<T>(s, shape, build, !positional_names);
        shape = layer->output_shape(shape);
      } catch (const Error& e) {
        // Errors that do not say where (a layer's own checks) get the place.
        const std::string& m = e.message();
        const std::string& where = s.args.where();
        if (m.rfind(where.substr(0, where.rfind(':')), 0) == 0) throw;
        STRATA_THROW(config, s.args.where(), ": layer ", layers.size(), " (", s.type,
                     ") with input shape ", shape.str(), ": ", m);
      }
      std::string name = s.name;
      if (!name.empty() && s.repeat > 1) name += "." + std::to_string(r);
      if (name.empty() && positional_names) name = std::to_string(layers.size());
      layers.push_back(std::move(layer));
      names.push_back(name);
    }
}

}  // namespace

template <class T>
ModelLayers<T> build_layers(const ModelSpec& spec, std::uint64_t seed) {
  ModelLayers<T> m;
  m.input = spec.input;
  LayerBuild build;
  build.seed = seed;
  build.sync_batchnorm = spec.sync_batchnorm;
  build.recompute = spec.recompute;
  Shape shape = spec.input;
  expand<T>(spec.layers, shape, build, m.layers, m.names, false);
  return m;
}

template <class T>
Sequential<T> build_model(const ModelSpec& spec, std::uint64_t seed) {
  ModelLayers<T> m = build_layers<T>(spec, seed);
  Sequential<T> model(m.input);
  try {
    for (std::size_t i = 0; i < m.layers.size(); ++i) model.add(std::move(m.layers[i]), m.names[i]);
  } catch (const Error& e) {
    STRATA_THROW(config, spec.source, ": ", e.message());
  }
  return model;
}

template const std::map<std::string, LayerFactory<float>>& layer_registry<float>();
template const std::map<std::string, LayerFactory<double>>& layer_registry<double>();
template ModelLayers<float> build_layers<float>(const ModelSpec&, std::uint64_t);
template ModelLayers<double> build_layers<double>(const ModelSpec&, std::uint64_t);
template Sequential<float> build_model<float>(const ModelSpec&, std::uint64_t);
template Sequential<double> build_model<double>(const ModelSpec&, std::uint64_t);

}  // namespace strata
