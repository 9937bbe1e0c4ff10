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
  for (const auto& w : config["layers"]) {
    STRATA_REQUIRE(w.is_number_unsigned(), data, what, ": its recorded layers ",
                   config["layers"].dump(), " are not whole numbers");
    mlp.widths.push_back(w.get<std::size_t>());
  }
  const auto activation = config.find("activation");
  const auto dropout = config.find("dropout");
  STRATA_REQUIRE((activation == config.end() || activation->is_string()) &&
                     (dropout == config.end() || dropout->is_number()),
                 data, what, ": its recorded activation or dropout is not a name or a number");
  mlp.activation = parse_activation(activation == config.end() ? "relu" : activation->get<std::string>());
  mlp.dropout = dropout == config.end() ? 0.0 : dropout->get<double>();
  return mlp_model(mlp);
}

}  // namespace strata::app
