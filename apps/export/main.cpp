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
// file holds the same tensors as strata-train --export at that step, without
// the input normalisation that --export adds to the metadata (a checkpoint
// does not record the data).
#include "apps/common/app_main.hpp"
#include "apps/common/cli.hpp"
#include "apps/common/saved_model.hpp"
#include "backends/runtime.hpp"
#include "layers/registry.hpp"
#include "strategies/checkpoint_state.hpp"
#include "strategies/weights.hpp"

#include <CLI/CLI.hpp>

#include <cstdio>
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

int run(const ExportConfig& c) {
  const safetensors::DType dtype = parse_weight_dtype(c.dtype, "--dtype");
  const std::string file = checkpoint_file(c.checkpoint);
  const ModelSpec spec = saved_model(c.model_file, c.seq_len, recorded_config(file),
                                     "checkpoint '" + file + "'");
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
  return program_main<ExportConfig>(
      "strata-export", argc, argv, [](const std::vector<std::string>& a, ExportConfig& c) { return parse(a, c); },
      [](const ExportConfig&) { return 0; }, [](const ExportConfig& c) { return run(c); });
}
