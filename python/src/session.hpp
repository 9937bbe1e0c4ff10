// A training run that a script drives one call at a time: what the Python
// module's Trainer is, in C++ and free of Python. It takes strata-train's
// options (the same names, checks and defaults: apps/train/train_config.hpp),
// builds the engine of every rank once, and keeps them between calls:
//
//   Session s({"--model", "models/gpt-mini.toml", "--ranks", "2", "--lr", "3e-4"});
//   double loss = s.step(batch);            // one optimizer step on a global batch
//   Evaluation e = s.evaluate(test_batch);
//   s.save("ckpt");  s.load("ckpt/checkpoint-000100.strata");
//
// Ranks: the thread ranks of --ranks live in a RankTeam (backends/ranks.hpp)
// whose contexts and communicators outlive each call; under mpirun or srun
// each process holds --ranks of the world's ranks (a hierarchical
// communicator over the thread ranks and MPI, as strata-train's). Calls must come
// from the thread that started the runtime (Kokkos 3.x launches kernels from
// it only), and every MPI process must make the same calls.
//
// Batches are read where they lie: on a host build each rank's rows of the
// caller's array are its batch (no copy); on a GPU build they are copied to
// the device once per step.
#pragma once

#include "apps/train/train_config.hpp"
#include "backends/comm/communicator.hpp"
#include "backends/context.hpp"
#include "backends/ranks.hpp"
#include "data/dataset.hpp"
#include "strategies/engine.hpp"
#include "training/trainer.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace strata::python {

// A global batch in host memory, row-major and contiguous: x (rows,
// features) and either labels (rows x label_width, int32) or values (rows x
// value_width). The caller keeps the arrays alive during the call.
struct HostBatch {
  const float* x = nullptr;
  std::size_t rows = 0, features = 0;
  const std::int32_t* labels = nullptr;
  std::size_t label_width = 0;
  const float* values = nullptr;
  std::size_t value_width = 0;
};

// What fit() reports through its callbacks (on the calling thread, rank 0).
struct FitHooks {
  std::function<void(const StepStats&)> on_step;
  std::function<void(const EvalStats&)> on_evaluation;
};

class Session {
 public:
  // args: strata-train's options (without --help, --version, --describe).
  // Throws strata::Error (config) naming a bad option.
  explicit Session(const std::vector<std::string>& args);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const app::TrainConfig& config() const { return config_; }
  const ModelSpec& model() const { return model_; }
  std::string describe() const { return describe_; }
  std::size_t num_params() const { return num_params_; }
  const ModelTable& table() const { return table_; }
  int ranks() const;            // of the whole run (thread ranks x processes)
  int rank() const;             // this process's first rank (MPI: its world rank)
  std::size_t steps() const { return position_.step; }  // optimizer steps done

  // The features of one sample and what a batch's targets must be: labels of
  // label_width per sample for cross-entropy (classes: the model's output
  // classes), values of value_width for MSE.
  std::size_t features() const { return features_; }
  std::size_t classes() const { return classes_; }
  std::size_t label_width() const { return label_width_; }
  std::size_t value_width() const { return value_width_; }

  // One optimizer step on a global batch (with --accumulate k, k micro-batches
  // of rows / k). The learning rate follows --lr-schedule over --steps.
  // Returns the mean loss. Throws config for a batch of the wrong shape
  // before any rank sees it.
  double step(const HostBatch& batch);
  // The model on a batch in evaluation mode (no update).
  Evaluation evaluate(const HostBatch& batch);
  // The training loop of strata-train on the configuration's data set
  // (--dataset, --epochs or --steps, evaluation, checkpoints), from where
  // the session stands.
  TrainResult fit(const FitHooks& hooks);
  // The run's length for fit() (and the learning-rate schedule): `steps`
  // more steps from where the session stands when > 0, else `epochs` in all
  // from the run's start when > 0 (0 and 0: as the options said).
  void set_length(std::size_t epochs, std::size_t steps);

  // Writes a checkpoint into dir (keeps --keep-checkpoints); returns its file.
  std::string save(const std::string& dir);
  // Restores a checkpoint file (any strategy's; the model must match), or
  // the latest of a checkpoint folder.
  void load(const std::string& path);
  // The weights in single-rank layout, and back.
  Weights weights();
  void set_weights(const Weights& w);

 private:
  struct Rank;
  // Calls body on every rank of this process (thread ranks in parallel).
  void on_ranks(const std::function<void(Rank&)>& body);
  void check(const HostBatch& b, const char* what) const;

  app::TrainConfig config_;
  ModelSpec model_;
  std::string describe_;
  std::size_t num_params_ = 0;
  ModelTable table_;
  std::size_t features_ = 0, classes_ = 0, label_width_ = 0, value_width_ = 0;
  Position position_;
  std::unique_ptr<comm::Communicator> world_;  // MPI's world, or one process
  std::unique_ptr<RankTeam> team_;             // the thread ranks (--ranks > 1)
  GemmBackend gemm_ = GemmBackend::portable;
  std::vector<std::unique_ptr<Rank>> ranks_;
};

// The data set of the options' --dataset, as strata-train reads and
// normalises it (for scripts that feed step() themselves).
data::Split load_dataset(const std::vector<std::string>& args);
data::Split load_dataset_for(const app::TrainConfig& c, const ModelSpec& model);

}  // namespace strata::python
