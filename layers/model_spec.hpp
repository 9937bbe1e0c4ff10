// Model descriptions: what a TOML model file (models/*.toml) or the --layers
// shorthand says, before any layer exists. build_model() turns one into the
// layers of a Sequential through the layer registry (layers/registry.hpp).
//
// A model file:
//
//   name = "residual-mlp"          # optional
//   input = [784]                  # per-sample input shape (rank 1-4)
//
//   [[layers]]
//   type = "linear"                # a registered layer type
//   out = 256                      # the type's options
//
//   [[layers]]
//   type = "residual"              # blocks: "residual" (y = x + f(x)), "block"
//   name = "blocks"                # parameter names: blocks.0.1.weight, ...
//   repeat = 4                     # 4 blocks, each a top-level layer
//   layers = [ { type = "layernorm" }, { type = "linear", out = 256 }, { type = "relu" } ]
//   recompute = true               # optional: recompute the inside in backward
//
// Model files are ASCII outside comments (toml++ 3.3 mishandles some other
// characters there). Names: a layer's parameter names start with its `name`, or its position
// when it has none (PyTorch's nn.Sequential); a repeated layer named N is
// N.0, N.1, ... (an nn.ModuleList). Every option is checked: an unknown key,
// a wrong type or a bad value is a config error naming the file, the line
// and the key.
#pragma once

#include "layers/shape.hpp"

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace strata {

struct MlpSpec;

// The options of one layer, with where each came from.
class LayerArgs {
 public:
  // An array of integers: kernel = [3, 5] and the like.
  using Ints = std::vector<std::int64_t>;
  using Value = std::variant<std::int64_t, double, bool, std::string, Ints>;

  LayerArgs() = default;
  // where: "file.toml:12" (the layer's table), type: the layer's type.
  LayerArgs(std::string where, std::string type) : where_(std::move(where)), type_(std::move(type)) {}

  void set(const std::string& key, Value v, std::size_t line = 0);
  bool has(const std::string& key) const { return values_.count(key) > 0; }

  // Typed reads; each marks its key as used. Throw config naming the file,
  // line, layer type and key when the value is missing or of another kind.
  std::size_t positive(const std::string& key);  // required integer > 0
  std::size_t positive(const std::string& key, std::size_t fallback);
  double number(const std::string& key, double fallback);  // integer or float
  bool flag(const std::string& key, bool fallback);
  std::string text(const std::string& key, const std::string& fallback);
  // A (height, width) pair of integers >= `least`: one integer for both, or
  // an array [h, w] (kernel = 3, padding = [1, 2]), as PyTorch's 2-D layers.
  std::array<std::size_t, 2> pair(const std::string& key, std::array<std::size_t, 2> fallback,
                                  std::size_t least);
  // Throws config naming every key no read used (a misspelt option).
  void finish() const;

  const std::string& where() const { return where_; }
  const std::string& type() const { return type_; }
  // "file.toml:12, key 'out'" or "file.toml:12" for the layer.
  std::string at(const std::string& key) const;
  const std::map<std::string, Value>& values() const { return values_; }

 private:
  const Value* find(const std::string& key);
  std::string where_, type_;
  std::map<std::string, Value> values_;
  std::map<std::string, std::size_t> lines_;
  std::map<std::string, bool> used_;
};

// Bounds that keep a description buildable: repetitions of one entry, and
// layers in all (inner layers of blocks included).
inline constexpr std::int64_t kMaxRepeat = 100000;
inline constexpr std::size_t kMaxLayers = 1000000;

struct LayerSpec {
  std::string type;
  std::string name;  // empty: the position
  std::size_t repeat = 1;
  LayerArgs args;
  std::vector<LayerSpec> layers;  // the inner layers of a block
};

struct ModelSpec {
  std::string source;  // the file, or "--layers 784,256,10"
  std::string name;
  Shape input;
  std::vector<LayerSpec> layers;
  bool mlp = false;  // made by mlp_model (the --layers shorthand)
  // sync_batchnorm = true: BatchNorm layers normalise over the whole batch
  // of every data-parallel rank (SyncBatchNorm; strata-train --sync-bn too).
  bool sync_batchnorm = false;
  // Every top-level block recomputes its inside in backward (strata-train
  // --recompute), as if each said `recompute = true`.
  bool recompute = false;
};

// `spec` with every top-level block recomputing when `on` (--recompute).
inline ModelSpec with_recompute(ModelSpec spec, bool on) {
  spec.recompute = spec.recompute || on;
  return spec;
}

// Reads a model file; throws config naming the file (and line and key) for
// a file that cannot be read, bad TOML, or a bad description.
ModelSpec read_model_file(const std::string& path);
// The same from text; `source` names it in errors.
ModelSpec parse_model(const std::string& text, const std::string& source);
// The MLP of --layers: Linear - activation - [Dropout] - ... - Linear.
ModelSpec mlp_model(const MlpSpec& spec);

}  // namespace strata
