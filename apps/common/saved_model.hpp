// What the programs that read a trained model share (strata-export,
// strata-predict): where a checkpoint is, and which model it holds.
#pragma once

#include "layers/model_spec.hpp"

#include <nlohmann/json.hpp>

#include <string>

namespace strata::app {

// The checkpoint file `path` names: itself, or what `latest` points to when
// it is a checkpoint directory or its `latest` file.
std::string checkpoint_file(const std::string& path);

// What strata-train recorded about the run of a checkpoint (its "config":
// dataset, seed, the --layers MLP's layers, activation and dropout, ...).
nlohmann::json recorded_config(const std::string& file);

// The model: the model file given (`seq_len` > 0 replacing a token model's
// input length), else the --layers MLP that `config` records; a config
// error saying to give --model when it records none.
ModelSpec saved_model(const std::string& model_file, std::size_t seq_len,
                      const nlohmann::json& config, const std::string& what);

}  // namespace strata::app
