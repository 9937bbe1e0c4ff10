// The training loop over an engine (strategies/engine.hpp), whatever the
// front end: epochs of a shuffled training set in optimizer steps of
// `accumulate` micro-batches, the learning-rate schedule, evaluation on the
// test set (each epoch and every eval_every steps), checkpoints (every
// checkpoint_every steps or each epoch, and at the end), the checks that stop
// a diverging run, and the samples/s after the warm-up steps. What to print
// or record is the caller's: the loop calls its hooks.
//
//   Trainer trainer(*engine, split, options, start);
//   TrainerHooks hooks;  hooks.on_step = [&](const StepStats& s) { ... };
//   const TrainResult r = trainer.fit(hooks);
//
// strata-train (apps/train/main.cpp) prints and writes metrics from its
// hooks; a fault-injection test installs after_step.
#pragma once

#include "data/augment.hpp"
#include "data/dataset.hpp"
#include "layers/lr_schedule.hpp"
#include "strategies/engine.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace strata {

struct TrainerOptions {
  std::size_t batch = 32;       // global batch (micro-batch of one step when accumulating)
  std::size_t accumulate = 1;   // micro-batches per optimizer step
  std::size_t steps = 0;        // total steps; 0: epochs x steps per epoch
  std::size_t epochs = 1;
  bool shuffle = true;
  std::uint64_t seed = 42;
  bool drop_last = false;       // --reproducible: whole chunks only
  data::Augment augment;
  LrSchedule lr_schedule;
  bool evaluate = true;         // on the test set, when it is not empty
  std::size_t eval_every = 0;   // steps; 0: at the end of each epoch only
  CheckpointTarget checkpoint;  // dir empty: no checkpoints
  std::size_t checkpoint_every = 0;  // steps; 0: each epoch
  std::size_t warmup_steps = 5;      // steps left out of samples/s
  std::size_t max_skipped_steps = 100;  // loss scaling's skipped steps in a row before giving up
  std::string resumed_from;     // the checkpoint the start position came from (messages)
};

// What the loop reports after every step.
struct StepStats {
  std::size_t step = 0, epoch = 0;  // step: steps done; epoch: 0-based
  std::size_t total = 0, epochs = 0;
  double loss = 0, lr = 0;
  double samples_per_sec = 0;       // since the warm-up (0 until then)
  double elapsed_s = 0;             // since the loop started
};

// An evaluation on the test set; `when` is "step N" or "epoch N".
struct EvalStats {
  std::size_t step = 0, epoch = 0;
  std::string when;
  Evaluation result;
  bool classification = true;
};

struct TrainerHooks {
  std::function<void(std::size_t step)> after_step;  // right after each step's checks
  std::function<void(const StepStats&)> on_step;     // after each step's bookkeeping
  std::function<void(const EvalStats&)> on_evaluation;
};

struct TrainResult {
  std::size_t steps = 0, first_step = 0;
  bool trained = false;              // at least one step ran
  double last_loss = 0;
  double samples_per_sec = 0;        // 0 when no step ran after the warm-up
  double data_wait_fraction = 0;     // of the timed steps' time, waiting for batches
  bool timed = false;                // a step ran after the warm-up
  Evaluation eval;                   // the last evaluation (valid on rank 0)
  std::string checkpoint;            // the final checkpoint's file ("" without)
};

class Trainer {
 public:
  // start: where a resumed run goes on (step, epoch, next micro-batch).
  // Throws config when the start lies beyond the run's end.
  Trainer(Engine& engine, const data::Split& data, const TrainerOptions& options,
          const Position& start, int rank);

  // The run's shape, known before fit().
  std::size_t total_steps() const { return total_; }
  std::size_t epochs() const { return epochs_; }

  TrainResult fit(const TrainerHooks& hooks);

 private:
  Engine& engine_;
  const data::Split& data_;
  TrainerOptions o_;
  Position start_;
  int rank_;
  std::vector<std::unique_ptr<data::BatchLoader<float>>> loaders_;  // one per micro-batch
  std::size_t per_epoch_ = 0, steps_per_epoch_ = 0, total_ = 0, epochs_ = 0;
};

}  // namespace strata
