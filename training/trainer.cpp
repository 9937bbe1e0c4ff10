#include "training/trainer.hpp"

#include "backends/clock.hpp"
#include "backends/comm/progress.hpp"
#include "backends/error.hpp"
#include "backends/trace.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

namespace strata {


Trainer::Trainer(Engine& engine, const data::Split& data, const TrainerOptions& options,
                 const Position& start, int rank)
    : engine_(engine), data_(data), o_(options), start_(start), rank_(rank) {
  STRATA_REQUIRE(o_.accumulate > 0, config, "Trainer: accumulate must be at least 1 micro-batch per step");
  // One loader per micro-batch of an optimizer step (each keeps its batch alive).
  for (std::size_t m = 0; m < o_.accumulate; ++m) {
    loaders_.push_back(std::make_unique<data::BatchLoader<float>>(
        data_.train, o_.batch, o_.shuffle, o_.seed, o_.drop_last, engine_.data_rank(),
        engine_.data_ranks()));
    loaders_.back()->set_augment(o_.augment);
  }
  per_epoch_ = loaders_[0]->batches_per_epoch();  // micro-batches
  steps_per_epoch_ = (per_epoch_ + o_.accumulate - 1) / o_.accumulate;
  total_ = o_.steps > 0 ? o_.steps : o_.epochs * steps_per_epoch_;
  epochs_ = (total_ + steps_per_epoch_ - 1) / steps_per_epoch_;
  STRATA_REQUIRE(start_.step <= total_, config,
                 o_.resumed_from.empty() ? std::string("the run is at step ")
                                         : "checkpoint '" + o_.resumed_from + "' is at step ",
                 start_.step, " but this run ends at step ", total_, " (raise --steps or --epochs)");
}

TrainResult Trainer::fit(const TrainerHooks& hooks) {
  TrainResult r;
  std::size_t step = start_.step, timed_samples = 0;
  r.first_step = start_.step;
  double timed_s = 0, timed_data_s = 0;  // after the warm-up steps
  std::size_t skipped_in_a_row = 0;
  const auto train0 = Clock::now();
  const bool saves = !o_.checkpoint.dir.empty();
  Position pos = start_;
  std::vector<data::Batch<float>> micro(o_.accumulate);
  // What a failed collective's report names: the step, the checkpoint to resume from.
  comm::progress::set_step(step);
  if (!o_.resumed_from.empty())
    comm::progress::checkpoint_saved(
        std::filesystem::path(o_.resumed_from).parent_path().string(), start_.step, true);
  // A checkpoint rank 0 wrote is complete on the other ranks once a later
  // step's collectives, which wait for rank 0, are done.
  auto save = [&] {
    std::string file = engine_.save(o_.checkpoint, pos);
    comm::progress::checkpoint_saved(o_.checkpoint.dir, step, rank_ == 0);
    return file;
  };
  // Data parallel: every rank holds the same parameters, rank 0 evaluates
  // and the others go on (they wait for it in the next step's collectives).
  // Model parallel: every rank takes part.
  const bool evaluates = o_.evaluate && data_.test.size() > 0;
  auto evaluate = [&](std::size_t epoch, const std::string& when) {
    if (!evaluates) return;
    if (rank_ == 0 || engine_.collective()) r.eval = engine_.evaluate(data_.test, o_.batch);
    if (rank_ != 0 || !hooks.on_evaluation) return;
    hooks.on_evaluation({step, epoch, when, r.eval, data_.test.is_classification()});
  };
  for (std::size_t epoch = start_.epoch; epoch < epochs_ && step < total_; ++epoch) {
    std::size_t index = epoch == start_.epoch ? start_.index : 0;
    while (step < total_ && index < per_epoch_) {
      // The micro-batches of this step (the last step of an epoch may have fewer).
      const std::size_t k = std::min(o_.accumulate, per_epoch_ - index);
      micro.resize(k);
      std::size_t global = 0;
      const auto data0 = Clock::now();
      for (std::size_t m = 0; m < k; ++m) {
        STRATA_SPAN("data", "next batch");
        loaders_[m]->seek(epoch, index++);
        loaders_[m]->next(micro[m]);
        global += loaders_[m]->global_size();
      }
      const double data_s = seconds_since(data0);
      const auto t0 = Clock::now();
      const double lr = scheduled_lr(o_.lr_schedule, step, total_);
      engine_.set_lr(lr);
      comm::progress::set_step(step);
      r.last_loss = engine_.step(micro, global);
      comm::progress::step_done();
      ++step;
      // "; the first non-finite values are in ..." (empty when none was found).
      auto nonfinite_origin = [&] {
        const std::string origin = engine_.first_nonfinite();
        return origin.empty() ? origin : "; the first non-finite values are in " + origin;
      };
      if (!std::isfinite(r.last_loss))
        STRATA_THROW(runtime, "training diverged: the loss is ", r.last_loss, " at step ", step,
                     " (epoch ", epoch + 1, ")", nonfinite_origin(), "; try a smaller --lr");
      // Loss scaling skips steps whose gradients overflow; at the scale's
      // floor that can go on forever with a finite loss.
      skipped_in_a_row = engine_.last_info().applied ? 0 : skipped_in_a_row + 1;
      if (skipped_in_a_row >= o_.max_skipped_steps)
        STRATA_THROW(runtime, "loss scaling skipped ", skipped_in_a_row,
                     " steps in a row for non-finite gradients, the last at step ", step,
                     " (epoch ", epoch + 1, ") with the loss scale at ",
                     engine_.last_info().loss_scale, nonfinite_origin(),
                     "; the gradients overflow even at that scale: try a smaller --lr, --precision "
                     "bf16, or --clip-grad-norm");
      if (hooks.after_step) hooks.after_step(step);
      if (o_.eval_every > 0 && step % o_.eval_every == 0 && index < per_epoch_ && step < total_)
        evaluate(epoch, "step " + std::to_string(step));
      // Where the next step starts.
      pos = index == per_epoch_ ? Position{step, epoch + 1, 0} : Position{step, epoch, index};
      if (saves && o_.checkpoint_every > 0 && step % o_.checkpoint_every == 0 && step < total_)
        save();
      if (step > r.first_step + o_.warmup_steps) {
        timed_s += seconds_since(t0);
        timed_data_s += data_s;
        timed_samples += global;
      }
      if (hooks.on_step)
        hooks.on_step({step, epoch, total_, epochs_, r.last_loss, lr,
                       timed_s > 0 ? static_cast<double>(timed_samples) / timed_s : 0,
                       seconds_since(train0)});
    }
    if (saves && o_.checkpoint_every == 0 && step < total_ && index == per_epoch_)
      save();
    evaluate(epoch, "epoch " + std::to_string(epoch + 1));
  }
  r.steps = step;
  r.trained = step > start_.step;
  // A resumed run that had nothing left to train evaluates what it restored
  // and leaves the checkpoint as it is.
  if (!r.trained && evaluates && (rank_ == 0 || engine_.collective()))
    r.eval = engine_.evaluate(data_.test, o_.batch);
  if (saves && r.trained) r.checkpoint = save();
  r.timed = timed_s > 0;
  r.samples_per_sec = r.timed ? static_cast<double>(timed_samples) / timed_s : 0;
  // The share of a step spent waiting for the next batch (its gathering,
  // augmentation and copy to the device beyond what overlapped the step).
  r.data_wait_fraction = r.timed ? timed_data_s / (timed_s + timed_data_s) : 0;
  return r;
}

}  // namespace strata
