#include "apps/common/saved_model.hpp"

#include "backends/error.hpp"
#include "layers/activation.hpp"
#include "layers/mlp.hpp"
#include "strategies/checkpoint.hpp"

#include <filesystem>

namespace strata::app {

std::string checkpoint_file(const std::string& path) {
  namespace fs = std::filesystem;
  if (fs::is_directory(path)) return checkpoint::latest(path);
  if (fs::path(path).filename() == "latest") return checkpoint::latest(fs::path(path).parent_path().string());
  return path;
}

nlohmann::json recorded_config(const std::string& file) {
  const nlohmann::json j = nlohmann::json::parse(checkpoint::load(file).config, nullptr, false);
  return j.is_object() ? j : nlohmann::json::object();
}

ModelSpec saved_model(const std::string& model_file, std::size_t seq_len,
                      const nlohmann::json& config, const std::string& what) {
  if (!model_file.empty()) {
    ModelSpec spec = read_model_file(model_file);
    if (seq_len > 0) spec.input = Shape{seq_len};
    return spec;
  }
  STRATA_REQUIRE(config.contains("layers") && config["layers"].is_array(), config, what,
                 " was trained with a model file: give it with --model");
  MlpSpec mlp;
  mlp.widths = config["layers"].get<std::vector<std::size_t>>();
  mlp.activation = parse_activation(config.value("activation", std::string("relu")));
  mlp.dropout = config.value("dropout", 0.0);
  return mlp_model(mlp);
}

}  // namespace strata::app
