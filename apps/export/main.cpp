// strata-export: a strata-train checkpoint as a safetensors file of its
// weights, under PyTorch's state_dict names (strategies/weights.hpp,
// docs/weights.md).
//
//   strata-export ck/latest model.safetensors                 (the MLP of --layers)
//   strata-export ck/ckpt-000000800.strata gpt.safetensors --model models/gpt-mini.toml
//
// Whole and sharded (model-parallel) checkpoints alike: the shards are
// verified and assembled in single-rank layout, as --resume does. The MLP of
// --layers is rebuilt from what the checkpoint records; a model file's
// checkpoint needs --model (and --seq-len when it was trained with one). The
// file holds the same values as strata-train --export at that step.
#include "apps/common/app_main.hpp"
#include "apps/common/cli.hpp"
#include "backends/runtime.hpp"
#include "layers/activation.hpp"
#include "layers/mlp.hpp"
#include "layers/registry.hpp"
#include "strategies/checkpoint.hpp"
#include "strategies/checkpoint_state.hpp"
#include "strategies/weights.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace strata::app {
namespace {

struct ExportConfig {
  std::string checkpoint, output, model_file, dtype = "f32";
  std::size_t seq_len = 0;
};

bool parse(const std::vector<std::string>& args, ExportConfig& c) {
  CLI::App app{"strata-export: write the weights of a strata-train checkpoint as a safetensors "
               "file, under the names PyTorch's state_dict uses (docs/weights.md).\n"
               "Exit codes: 0 done, 2 bad options or configuration, 3 bad input data, "
               "4 a file that cannot be written.",
               "strata-export"};
  app.add_option("checkpoint", c.checkpoint,
                 "a checkpoint file (whole or a sharded checkpoint's manifest), a checkpoint "
                 "directory, or its 'latest' file")
      ->required();
  app.add_option("output", c.output, "the safetensors file to write")->required();
  app.add_option("--model", c.model_file,
                 "the model file it was trained with (not needed for the MLP of --layers)");
  app.add_option("--seq-len", c.seq_len, "the --seq-len it was trained with")->check(whole_number(1));
  app.add_option("--dtype", c.dtype, "f32, bf16, f16 or f64")->capture_default_str();
  return parse_cli(app, args);
}

// The checkpoint file a path names: itself, or what a directory's (or a
// given) `latest` points to.
std::string checkpoint_file(const std::string& path) {
  namespace fs = std::filesystem;
  if (fs::is_directory(path)) return checkpoint::latest(path);
  if (fs::path(path).filename() == "latest") return checkpoint::latest(fs::path(path).parent_path().string());
  return path;
}

int run(const ExportConfig& c) {
  const safetensors::DType dtype = parse_weight_dtype(c.dtype, "--dtype");
  const std::string file = checkpoint_file(c.checkpoint);
  // What the checkpoint was trained with: the MLP of --layers is in it.
  const nlohmann::json config = nlohmann::json::parse(checkpoint::load(file).config, nullptr, false);
  ModelSpec spec;
  if (!c.model_file.empty()) {
    spec = read_model_file(c.model_file);
    if (c.seq_len > 0) spec.input = Shape{c.seq_len};
  } else {
    STRATA_REQUIRE(config.is_object() && config.contains("layers") && config["layers"].is_array(),
                   config, "checkpoint '", file, "' was trained with a model file: give it with --model");
    MlpSpec mlp;
    mlp.widths = config["layers"].get<std::vector<std::size_t>>();
    mlp.activation = parse_activation(config.value("activation", std::string("relu")));
    mlp.dropout = config.value("dropout", 0.0);
    spec = mlp_model(mlp);
  }
  const Sequential<float> model = build_model<float>(spec, 1);
  const ModelTable table{model.parameters(), model.buffers(), spec.mlp, model.tied_weights()};
  auto [snapshot, position] = read_checkpoint(file, "{}", table);
  Weights w{std::move(snapshot.params), std::move(snapshot.buffers)};
  safetensors::write(c.output, export_weights(table, w, dtype));
  std::fprintf(stderr, "strata-export: %s (step %zu, %zu tensors) -> %s\n", file.c_str(),
               position.step, table.params.size(), c.output.c_str());
  return exit_ok;
}

}  // namespace
}  // namespace strata::app

int main(int argc, char** argv) {
  using namespace strata::app;
  std::unique_ptr<strata::Runtime> runtime;
  return guarded("strata-export", [&] {
    auto args = split_kokkos_args(argc, argv);
    ExportConfig c;
    if (!parse(args.program, c)) return exit_ok;
    int kargc = static_cast<int>(args.kokkos.size()) - 1;
    runtime = std::make_unique<strata::Runtime>(kargc, args.kokkos.data());
    return run(c);
  });
}
