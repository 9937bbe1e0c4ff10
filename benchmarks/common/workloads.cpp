#include "benchmarks/common/workloads.hpp"

#include "backends/error.hpp"
#include "layers/mlp.hpp"
#include "layers/model_spec.hpp"
#include "layers/registry.hpp"
#include "training/synthetic_data.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <sstream>

namespace strata::bench {

const std::vector<Workload>& workloads() {
  static const std::vector<Workload> w = {
      {"W1", {10, 5, 2}, "", LossKind::mse, 32, 2000},
      {"W2", {784, 1024, 1024, 10}, "", LossKind::cross_entropy, 256, 20},
      {"W3", {4096, 4096, 4096, 4096, 4096, 10}, "", LossKind::cross_entropy, 512, 2},
      {"W4", {}, "cnn-fashion.toml", LossKind::cross_entropy, 128, 10},
      {"W5", {}, "gpt-mini.toml", LossKind::cross_entropy, 32, 4, OptimizerKind::adamw}};
  return w;
}

namespace {
std::string joined(const std::vector<std::size_t>& v, char sep) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? std::string(1, sep) : "") + std::to_string(v[i]);
  return s;
}
std::string names(const std::vector<std::string>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i)
    s += (i == 0 ? "" : i + 1 == v.size() ? " or " : ", ") + v[i];
  return s;
}
}  // namespace

std::string Workload::title() const {
  std::string what = model.empty() ? joined(widths, '-') : model.substr(0, model.rfind('.'));
  return name + " (" + what + ", batch " + std::to_string(batch) +
         (optimizer == OptimizerKind::sgd ? "" : std::string(", ") + to_string(optimizer)) + ")";
}

std::string Workload::train_args() const {
  std::ostringstream s;
  if (model.empty()) s << "--layers " << joined(widths, ',');
  else s << "--model " << model_path(model);
  s << " --loss " << to_string(loss) << " --batch-size " << batch
    << " --optimizer " << to_string(optimizer) << " --lr " << lr();
  return s.str();
}

std::vector<Workload> select_workloads(const std::string& list, const std::string& option,
                                       const std::vector<std::string>& allowed) {
  std::vector<std::string> known;
  for (const auto& w : workloads())
    if (allowed.empty() || std::find(allowed.begin(), allowed.end(), w.name) != allowed.end())
      known.push_back(w.name);
  std::vector<Workload> out;
  std::stringstream ss(list);
  for (std::string name; std::getline(ss, name, ',');) {
    const auto it = std::find_if(workloads().begin(), workloads().end(),
                                 [&](const Workload& w) { return w.name == name; });
    STRATA_REQUIRE(it != workloads().end() &&
                       std::find(known.begin(), known.end(), name) != known.end(),
                   config, option, ": unknown workload '", name, "' (expected ", names(known), ")");
    if (std::none_of(out.begin(), out.end(), [&](const Workload& w) { return w.name == name; }))
      out.push_back(*it);  // in the order given, each once
  }
  STRATA_REQUIRE(!out.empty(), config, option, ": no workload given (expected ", names(known), ")");
  return out;
}

std::string model_path(const std::string& file) {
  namespace fs = std::filesystem;
  std::vector<fs::path> dirs;
  if (const char* env = std::getenv("STRATA_MODELS_DIR")) dirs.emplace_back(env);
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) dirs.push_back(exe.parent_path().parent_path() / "share" / "strata" / "models");
  dirs.emplace_back(STRATA_SOURCE_MODELS_DIR);
  for (const auto& d : dirs)
    if (fs::exists(d / file)) return (d / file).string();
  STRATA_THROW(config, "model file ", file, " not found in $STRATA_MODELS_DIR, ",
               dirs.size() > 1 ? dirs[dirs.size() - 2].string() : std::string(), " or ",
               STRATA_SOURCE_MODELS_DIR, " (set STRATA_MODELS_DIR to the models/ folder)");
}

Sequential<float> make_model(const Workload& w) {
  if (w.model.empty()) return make_mlp<float>({w.widths});
  return build_model<float>(read_model_file(model_path(w.model)), 1);
}

data::Dataset make_data(const Workload& w, const Sequential<float>& model, std::size_t samples) {
  return synthetic_data(model, w.loss, samples, 3);
}

}  // namespace strata::bench
