// strata-predict: runs a trained model over a data set and writes its
// predictions, with the accuracy and a confusion matrix when there are labels.
//
//   strata-predict --checkpoint ck/latest --output predictions.csv
//   strata-predict --weights model.safetensors --model models/cnn-fashion.toml --format jsonl
//
// The model is the checkpoint's (the --layers MLP is rebuilt from what the
// checkpoint records; a model file's needs --model) or a safetensors file's
// with --model or --layers. The data are strata-train's: the same --dataset
// options select, split and normalise them as training did (the checkpoint's
// data set, seed and loss are the defaults; give --samples, --test-fraction,
// --normalize and --input-shape as the run did). Each sample of the split (--split test or
// train) gets a row: its index, its label, the predicted class and the
// softmax probabilities (classification), or the targets and outputs
// (--loss mse).
#include "apps/common/app_main.hpp"
#include "apps/common/cli.hpp"
#include "apps/common/saved_model.hpp"
#include "apps/train/setup.hpp"
#include "backends/runtime.hpp"
#include "data/loader.hpp"
#include "layers/mlp.hpp"
#include "layers/registry.hpp"
#include "strategies/checkpoint_state.hpp"
#include "strategies/weights.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace strata::app {
namespace {

struct PredictConfig {
  TrainConfig data;  // the model and data options, as strata-train reads them
  std::string checkpoint, weights, output = "-", format, split = "test";
  bool dataset_given = false, seed_given = false, layers_given = false, loss_given = false;
  bool strict = true;  // --weights: refuse a file that does not match the model
  std::size_t batch = 256;
  int threads = 0;
};

bool parse(const std::vector<std::string>& args, PredictConfig& c) {
  CLI::App app{"strata-predict: run a trained model over a data set and write its predictions "
               "(docs/weights.md).\nThe model and data options are strata-train's; with --checkpoint, those not "
               "given take the run's values (data set, seed, loss, the --layers MLP).\nExit codes: 0 done, 2 bad options or configuration, 3 bad "
               "input data, 4 a file that cannot be written.",
               "strata-predict"};
  TrainConfig& d = c.data;
  auto* ck = app.add_option("--checkpoint", c.checkpoint,
                            "a strata-train checkpoint (file, sharded manifest, directory or its 'latest')");
  auto* w = app.add_option("--weights", c.weights, "a safetensors file (strata-train --export, or PyTorch's)");
  ck->excludes(w);
  // The model and data options strata-train reads, with its defaults; a
  // checkpoint's data set, seed, loss and MLP stand in for those not given.
  ModelDataOptions o;
  add_model_data_options(app, d, o);
  app.add_flag("--strict,!--no-strict", c.strict,
               "--weights: refuse a file with missing, unexpected or mis-shaped tensors (default)");
  app.add_option("--split", c.split, "test or train")->capture_default_str()->check(CLI::IsMember({"test", "train"}));
  app.add_option("--output", c.output, "where to write the predictions ('-': standard output)")
      ->capture_default_str();
  app.add_option("--format", c.format, "csv or jsonl (default: from --output's extension, else csv)")
      ->check(CLI::IsMember({"csv", "jsonl"}));
  app.add_option("--batch-size", c.batch, "samples per forward")->capture_default_str()->check(whole_number(1));
  app.add_option("--threads", c.threads, "host threads")->check(whole_number(1));
  if (!parse_cli(app, args)) return false;
  STRATA_REQUIRE(!c.checkpoint.empty() || !c.weights.empty(), config,
                 "give the trained model: --checkpoint PATH or --weights FILE");
  finish_model_data_options(o, d);
  c.dataset_given = o.dataset->count() > 0;
  c.seed_given = o.seed->count() > 0;
  c.layers_given = o.layers_option->count() > 0;
  c.loss_given = o.loss_option->count() > 0;
  if (c.format.empty())
    c.format = c.output.size() > 6 && c.output.substr(c.output.size() - 6) == ".jsonl" ? "jsonl" : "csv";
  return true;
}

// Row i of a host copy of a (rows, width) matrix.
std::vector<double> row(const std::vector<float>& m, std::size_t width, std::size_t i) {
  return std::vector<double>(m.begin() + static_cast<std::ptrdiff_t>(i * width),
                             m.begin() + static_cast<std::ptrdiff_t>((i + 1) * width));
}

int run(PredictConfig& c) {
  TrainConfig& d = c.data;
  // The model and its weights.
  nlohmann::json recorded = nlohmann::json::object();
  std::string file;
  if (!c.checkpoint.empty()) {
    file = checkpoint_file(c.checkpoint);
    recorded = recorded_config(file);
  }
  if (c.layers_given) {
    recorded["layers"] = d.layers;
    recorded["activation"] = to_string(d.activation);
    recorded["dropout"] = d.dropout;
  }
  STRATA_REQUIRE(!file.empty() || !d.model_file.empty() || c.layers_given, config, "--weights ",
                 c.weights, " holds weights, not the model: give --model FILE or --layers WIDTHS");
  const ModelSpec spec = saved_model(d.model_file, d.seq_len, recorded, "checkpoint '" + file + "'");
  if (d.model_file.empty() && recorded.contains("layers")) d.layers = recorded["layers"].get<std::vector<std::size_t>>();
  if (!c.dataset_given && recorded.contains("dataset")) d.dataset = recorded["dataset"].get<std::string>();
  if (!c.seed_given && recorded.contains("seed")) d.seed = recorded["seed"].get<std::uint64_t>();
  if (recorded.contains("tokenizer") && d.tokenizer.empty()) d.tokenizer = recorded["tokenizer"].get<std::string>();
  if (!c.loss_given && recorded.contains("loss") && recorded["loss"].is_string())
    d.loss = parse_loss(recorded["loss"].get<std::string>());
  check_data_rules(d);  // with the checkpoint's data set and loss where none was given
  // The split as training made it (also for --split train: the same rows
  // and the normalisation fitted to them; --test-fraction 0 for a run
  // trained with --no-eval).
  d.evaluate = true;
  Sequential<float> model = build_model<float>(spec, d.seed);
  const data::Split split = load_data(d, model);
  const data::Dataset& set = c.split == "test" ? split.test : split.train;
  STRATA_REQUIRE(set.size() > 0, config, set.name, " has no samples (the test split needs a "
                 "--test-fraction above 0 for synthetic, CSV and text data)");
  STRATA_REQUIRE(set.label_width <= 1, config, spec.source, " predicts ", set.label_width,
                 " positions per sample (a language model): strata-generate writes its text");
  const ModelTable table{model.parameters(), model.buffers(), spec.mlp, model.tied_weights()};
  model.build(std::min(c.batch, set.size()));
  model.init(Init::kaiming_uniform, d.seed);
  Weights w{std::vector<float>(model.num_params()), model.read_buffers()};
  std::string source;
  if (!file.empty()) {
    auto [snapshot, position] = read_checkpoint(file, "{}", table);
    w.params = std::move(snapshot.params);
    w.buffers = std::move(snapshot.buffers);
    source = file + " (step " + std::to_string(position.step) + ")";
  } else {
    const ImportReport r = import_weights(safetensors::read(c.weights), c.weights, table, w, c.strict);
    for (const auto& s : r.missing) std::fprintf(stderr, "strata-predict: not in the file, left as initialised: %s\n", s.c_str());
    for (const auto& s : r.unexpected) std::fprintf(stderr, "strata-predict: not in the model, skipped: %s\n", s.c_str());
    for (const auto& s : r.mismatched) std::fprintf(stderr, "strata-predict: of another shape, skipped: %s\n", s.c_str());
    source = c.weights;
  }
  Kokkos::deep_copy(model.params(),
                    Kokkos::View<const float*, Kokkos::HostSpace, Unmanaged>(w.params.data(), w.params.size()));
  model.write_buffers(w.buffers);
  model.set_training(false);

  // The predictions.
  std::ofstream file_out;
  if (c.output != "-") {
    file_out.open(c.output, std::ios::trunc);
    STRATA_REQUIRE(file_out, runtime, "--output: cannot write '", c.output, "'");
  }
  std::ostream& out = c.output == "-" ? std::cout : file_out;
  const bool classes = set.is_classification();
  const std::size_t width = model.out_features();
  const bool jsonl = c.format == "jsonl";
  if (!jsonl) {
    out << "index," << (classes ? "label,predicted" : "");
    for (std::size_t j = 0; j < width; ++j)
      out << (classes || j ? "," : "") << (classes ? "p" : "output") << j;
    if (!classes)
      for (std::size_t j = 0; j < set.target_width; ++j) out << ",target" << j;
    out << "\n";
  }
  Context ctx;
  data::BatchLoader<float> loader(set, std::min(c.batch, set.size()), false, 0);
  data::Batch<float> b;
  std::size_t index = 0, correct = 0;
  std::vector<std::vector<std::size_t>> confusion(width, std::vector<std::size_t>(width, 0));
  double squared = 0;
  char buf[32];
  auto num = [&](double v) {
    std::snprintf(buf, sizeof buf, "%.7g", v);
    return std::string(buf);
  };
  while (loader.next(b)) {
    const ConstMatrix<float> logits = model.forward(ctx, b.x);
    std::vector<float> y(logits.size());
    Kokkos::deep_copy(Kokkos::View<float**, Kokkos::LayoutRight, Kokkos::HostSpace, Unmanaged>(
                          y.data(), logits.extent(0), logits.extent(1)),
                      logits);
    for (std::size_t i = 0; i < b.size(); ++i, ++index) {
      std::vector<double> z = row(y, width, i);
      if (classes) {
        std::size_t best = 0;
        for (std::size_t j = 1; j < width; ++j)
          if (z[j] > z[best]) best = j;
        const double top = z[best];  // softmax, the largest logit subtracted
        double sum = 0;
        for (double& v : z) sum += v = std::exp(v - top);
        for (double& v : z) v /= sum;
        const auto label = static_cast<std::size_t>(set.labels[index]);
        correct += best == label;
        if (label < width) ++confusion[label][best];
        if (jsonl) {
          out << nlohmann::json{{"index", index}, {"label", label}, {"predicted", best}, {"probabilities", z}}.dump() << "\n";
        } else {
          out << index << "," << label << "," << best;
          for (double v : z) out << "," << num(v);
          out << "\n";
        }
      } else {
        const std::vector<double> t(set.targets.begin() + static_cast<std::ptrdiff_t>(index * set.target_width),
                                    set.targets.begin() + static_cast<std::ptrdiff_t>((index + 1) * set.target_width));
        for (std::size_t j = 0; j < width && j < t.size(); ++j) squared += (z[j] - t[j]) * (z[j] - t[j]);
        if (jsonl) {
          out << nlohmann::json{{"index", index}, {"outputs", z}, {"targets", t}}.dump() << "\n";
        } else {
          out << index;
          for (double v : z) out << "," << num(v);
          for (double v : t) out << "," << num(v);
          out << "\n";
        }
      }
    }
  }
  out.flush();
  STRATA_REQUIRE(out, runtime, "--output: writing '", c.output, "' failed");
  // The summary, on standard error.
  std::fprintf(stderr, "strata-predict: %s on %s, %zu samples\n", source.c_str(), set.name.c_str(), index);
  if (classes) {
    std::fprintf(stderr, "accuracy %.4f (%zu of %zu)\nconfusion matrix (rows: label, columns: predicted):\n",
                 static_cast<double>(correct) / static_cast<double>(index), correct, index);
    for (std::size_t r = 0; r < width; ++r) {
      std::string line = "  " + std::to_string(r) + ":";
      for (std::size_t k = 0; k < width; ++k) {
        std::snprintf(buf, sizeof buf, " %6zu", confusion[r][k]);
        line += buf;
      }
      std::fprintf(stderr, "%s\n", line.c_str());
    }
  } else {
    std::fprintf(stderr, "mean squared error %.6g\n",
                 squared / static_cast<double>(index * std::max<std::size_t>(1, set.target_width)));
  }
  return exit_ok;
}

}  // namespace
}  // namespace strata::app

int main(int argc, char** argv) {
  using namespace strata::app;
  return program_main<PredictConfig>(
      "strata-predict", argc, argv, [](const std::vector<std::string>& a, PredictConfig& c) { return parse(a, c); },
      [](const PredictConfig& c) { return c.threads; }, [](PredictConfig& c) { return run(c); });
}
