// The benchmark workloads of docs/benchmarks.md, defined once for every
// benchmark program (and, through `strata-bench-train --print-workload W`,
// for the scripts that run strata-train on them):
//   W1  the tutorial's MLP 10-5-2, MSE, batch 32
//   W2  a Fashion-MNIST-shaped MLP 784-1024-1024-10, batch 256
//   W3  a wide MLP 4 x 4096 to 10 classes, batch 512
//   W4  the CNN of models/cnn-fashion.toml, batch 128
//   W5  the transformer of models/gpt-mini.toml, batch 32, AdamW
// MLPs are Linear-ReLU-...-Linear; SGD learns at 0.01, AdamW at 0.001.
#pragma once

#include "data/dataset.hpp"
#include "layers/loss.hpp"
#include "layers/optimizer.hpp"
#include "layers/sequential.hpp"

#include <string>
#include <vector>

namespace strata::bench {

struct Workload {
  std::string name;
  std::vector<std::size_t> widths;  // an MLP, or
  std::string model;                // a model file of models/
  LossKind loss;
  std::size_t batch;
  std::size_t steps;  // per repetition of strata-bench-train
  OptimizerKind optimizer = OptimizerKind::sgd;

  double lr() const { return optimizer == OptimizerKind::sgd ? 0.01 : 0.001; }
  // "W2 (784-1024-1024-10, batch 256)".
  std::string title() const;
  // strata-train's options for this model, loss, batch and optimizer
  // ("--layers 784,1024,1024,10 --loss cross-entropy --batch-size 256
  // --optimizer sgd --lr 0.01"; a model file by its full path).
  std::string train_args() const;
};

const std::vector<Workload>& workloads();

// The workloads of a comma-separated list of names, in the list's order
// (a name given twice runs once);
// throws config naming `option` and the unknown name or one outside
// `allowed` (empty: all are).
std::vector<Workload> select_workloads(const std::string& list, const std::string& option,
                                       const std::vector<std::string>& allowed = {});

// A model file of models/: $STRATA_MODELS_DIR, the installed
// share/strata/models beside this program's bin/, or the source tree's.
std::string model_path(const std::string& file);

// The workload's model, not built (initialisation seed 1).
Sequential<float> make_model(const Workload& w);

// Seeded synthetic data of `samples` samples shaped for `model` (the
// workload's): normal inputs with uniform labels (classification) or normal
// targets (MSE); a language model (an Embedding first) gets token windows.
data::Dataset make_data(const Workload& w, const Sequential<float>& model, std::size_t samples);

}  // namespace strata::bench
