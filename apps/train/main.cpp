// strata-train: trains a model (a model file, or the MLP of --layers) on
// Fashion-MNIST, a CSV file or synthetic data with the strategy the options
// ask for (strategies/engine.hpp), and reports the loss, the test accuracy
// and the speed.
#include "apps/common/app_main.hpp"
#include "apps/common/progress.hpp"
#include "apps/train/fault.hpp"
#include "apps/train/metrics.hpp"
#include "apps/train/setup.hpp"
#include "apps/train/train_config.hpp"
#include "backends/runtime.hpp"
#include "backends/kernel_shapes.hpp"
#include "backends/trace.hpp"
#include "data/loader.hpp"
#include "backends/comm/hierarchical.hpp"
#include "backends/comm/registry.hpp"
#include "backends/device.hpp"
#include "strata_config.hpp"
#if STRATA_HAS_NCCL
#include "backends/comm/nccl.hpp"
#endif
#include "backends/ranks.hpp"
#include "layers/registry.hpp"
#include "strategies/engine.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <thread>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>

namespace strata::app {
namespace {

using Clock = std::chrono::steady_clock;
using T = float;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// Where this rank prints and what it reports.
struct Reporter {
  bool active;  // global rank 0 (or every rank with --verbose-ranks)
  bool writes_metrics;
  std::string prefix;  // "[rank 3] " with --verbose-ranks
};

// Trains on one rank of `comm` (all ranks run this).
void train_rank(const TrainConfig& c, const ModelSpec& model, const data::Split& d,
                const data::Normalizer& norm, Context& ctx,
                comm::Communicator& comm, const Reporter& rep, Metrics& metrics) {
  const auto wall0 = Clock::now();
  Progress progress(rep.active && !c.quiet);
  const std::size_t batch = std::min(c.batch_size, d.train.size());
  const std::unique_ptr<Engine> engine =
      make_engine(ctx, comm, engine_options(c, model, comm.size()), batch);
  // Every rank restores the same checkpoint (it holds the whole model in
  // single-rank layout: any strategy and mesh resumes it).
  Position start;
  const std::string resume_file =
      !c.resume_from.empty() ? c.resume_from : c.resume ? checkpoint::latest(c.checkpoint_dir) : "";
  if (!resume_file.empty()) {
    auto [snapshot, position] = read_checkpoint(resume_file, checkpoint_config(c), engine->table());
    engine->restore(snapshot);
    start = position;
  }
  // Weights from a safetensors file (every rank reads it and sets the same).
  std::string init_note;
  if (!c.init_from.empty()) {
    const ImportReport r = load_weights(*engine, c.init_from, c.strict);
    init_note = "initialised from " + c.init_from + ": " + std::to_string(r.loaded) + " tensors";
    auto add = [&](const std::vector<std::string>& v, const char* kind) {
      for (const std::string& s : v) init_note += "\n" + rep.prefix + "  " + kind + ": " + s;
    };
    add(r.missing, "missing, kept the model's initialisation");
    add(r.unexpected, "unexpected, skipped");
    add(r.mismatched, "of another shape, skipped");
  }
  // One loader per micro-batch of an optimizer step (each keeps its batch alive).
  std::vector<std::unique_ptr<data::BatchLoader<T>>> loaders;
  for (std::size_t m = 0; m < c.accumulate; ++m)
    loaders.push_back(std::make_unique<data::BatchLoader<T>>(
        d.train, batch, c.shuffle, c.seed, /*drop_last=*/c.reproducible, engine->data_rank(),
        engine->data_ranks()));
  const data::Augment augment{c.random_crop, c.random_flip, d.train.zero};
  for (auto& l : loaders) l->set_augment(augment);
  const std::size_t per_epoch = loaders[0]->batches_per_epoch();  // micro-batches
  const std::size_t steps_per_epoch = (per_epoch + c.accumulate - 1) / c.accumulate;
  const std::size_t total = c.steps > 0 ? c.steps : c.epochs * steps_per_epoch;
  const std::size_t epochs = (total + steps_per_epoch - 1) / steps_per_epoch;
  progress.line(rep.prefix + build_summary() + ", " + std::to_string(comm.size()) + " rank(s) (" +
                comm.name() + "), " + std::to_string(ctx.threads) + " thread(s) per rank");
  if (!resume_file.empty())
    progress.line(rep.prefix + "resumed from " + resume_file + " at step " +
                  std::to_string(start.step) + " (epoch " + std::to_string(start.epoch + 1) + ")");
  if (!init_note.empty()) progress.line(rep.prefix + init_note);
  progress.line(rep.prefix + "strategy: " + engine->describe());
  for (const std::string& note : option_notes(c, model)) progress.line(rep.prefix + "note: " + note);
  progress.line(rep.prefix + "model: " + std::to_string(engine->num_params()) + " parameters, " +
                std::to_string(d.train.size()) + " training samples (" + d.train.name +
                "), global batch " + std::to_string(batch) +
                (c.accumulate > 1 ? " x " + std::to_string(c.accumulate) + " accumulated" : "") +
                ", " + std::to_string(total) + " steps in " + std::to_string(epochs) + " epoch(s)");

  std::size_t step = start.step, timed_samples = 0, first_step = start.step;
  STRATA_REQUIRE(step <= total, config, "checkpoint '", resume_file, "' is at step ", step,
                 " but this run ends at step ", total, " (raise --steps or --epochs)");
  if (!resume_file.empty() && step == total)
    progress.line(rep.prefix + "nothing to train: the checkpoint is at step " +
                  std::to_string(step) + ", where this run ends (raise --steps or --epochs); "
                  "evaluating the restored model");
  double timed_s = 0, timed_data_s = 0, last_loss = 0;  // timed: after the warm-up steps
  std::size_t skipped_in_a_row = 0;
  Evaluation eval;
  const auto train0 = Clock::now();
  const bool saves = !c.checkpoint_dir.empty();
  const CheckpointTarget target{c.checkpoint_dir, c.keep_checkpoints, checkpoint_config(c)};
  auto save = [&](const Position& p) { return engine->save(target, p); };
  Position pos = start;
  const Fault fault = Fault::from_environment(comm.name() == "mpi");
  std::vector<data::Batch<T>> micro(c.accumulate);
  // Evaluation on the test split (end of each epoch, and every --eval-every
  // steps). Data parallel: every rank holds the same parameters, rank 0
  // evaluates and the others go on (they wait for it in the next step's
  // collectives). Model parallel: every rank takes part.
  auto evaluate_and_report = [&](std::size_t epoch, const std::string& when) {
    if (!c.evaluate || d.test.size() == 0) return;
    if (comm.rank() == 0 || engine->collective()) eval = engine->evaluate(d.test, batch);
    if (comm.rank() != 0) return;
    nlohmann::json j{{"step", step}, {"epoch", epoch + 1}, {"wall_s", seconds_since(wall0)}};
    std::string text = when + ": ";
    if (d.test.is_classification()) {
      j["test_accuracy"] = eval.accuracy;
      j["test_loss"] = eval.loss;
      text += "test accuracy " + fmt("%.4f", eval.accuracy) + ", test loss " + fmt("%.4f", eval.loss);
    } else {
      j["test_loss"] = eval.loss;
      text += "test loss " + fmt("%.6f", eval.loss);
    }
    if (rep.writes_metrics) metrics.write(j);
    progress.line(rep.prefix + text);
  };
  for (std::size_t epoch = start.epoch; epoch < epochs && step < total; ++epoch) {
    std::size_t index = epoch == start.epoch ? start.index : 0;
    while (step < total && index < per_epoch) {
      // The micro-batches of this step (the last step of an epoch may have fewer).
      const std::size_t k = std::min(c.accumulate, per_epoch - index);
      micro.resize(k);
      std::size_t global = 0;
      const auto data0 = Clock::now();
      for (std::size_t m = 0; m < k; ++m) {
        STRATA_SPAN("data", "next batch");
        loaders[m]->seek(epoch, index++);
        loaders[m]->next(micro[m]);
        global += loaders[m]->global_size();
      }
      const double data_s = seconds_since(data0);
      const auto t0 = Clock::now();
      const double lr = scheduled_lr(c.lr_schedule, step, total);
      engine->set_lr(lr);
      last_loss = engine->step(micro, global);
      ++step;
      // "; the first non-finite values are in ..." (empty when none was found).
      auto nonfinite_origin = [&] {
        const std::string origin = engine->first_nonfinite();
        return origin.empty() ? origin : "; the first non-finite values are in " + origin;
      };
      if (!std::isfinite(last_loss))
        STRATA_THROW(runtime, "training diverged: the loss is ", last_loss, " at step ", step,
                     " (epoch ", epoch + 1, ")", nonfinite_origin(), "; try a smaller --lr");
      // Loss scaling skips steps whose gradients overflow; at the scale's
      // floor that can go on forever with a finite loss.
      skipped_in_a_row = engine->last_info().applied ? 0 : skipped_in_a_row + 1;
      if (skipped_in_a_row >= c.max_skipped_steps)
        STRATA_THROW(runtime, "loss scaling skipped ", skipped_in_a_row,
                     " steps in a row for non-finite gradients, the last at step ", step,
                     " (epoch ", epoch + 1, ") with the loss scale at ",
                     engine->last_info().loss_scale, nonfinite_origin(),
                     "; the gradients overflow even at that scale: try a smaller --lr, --precision "
                     "bf16, or --clip-grad-norm");
      fault.maybe_fail(comm.rank(), step);
      if (c.eval_every > 0 && step % c.eval_every == 0 && index < per_epoch && step < total)
        evaluate_and_report(epoch, "step " + std::to_string(step));
      // Where the next step starts.
      pos = index == per_epoch ? Position{step, epoch + 1, 0} : Position{step, epoch, index};
      if (saves && c.checkpoint_every > 0 && step % c.checkpoint_every == 0 && step < total)
        save(pos);
      if (step > first_step + c.warmup_steps) {
        timed_s += seconds_since(t0);
        timed_data_s += data_s;
        timed_samples += global;
      }
      const bool log = c.log_every > 0 && (step % c.log_every == 0 || step == total);
      const double rate = timed_s > 0 ? timed_samples / timed_s : 0;
      if (log) {
        if (rep.writes_metrics)
          metrics.write({{"step", step},
                         {"epoch", epoch + 1},
                         {"loss", last_loss},
                         {"lr", lr},
                         {"samples_per_sec", rate > 0 ? nlohmann::json(rate) : nlohmann::json()},
                         {"wall_s", seconds_since(wall0)}});
        if (!progress.tty())
          progress.line(rep.prefix + "epoch " + std::to_string(epoch + 1) + " step " +
                        std::to_string(step) + "/" + std::to_string(total) + " loss " +
                        fmt("%.6f", last_loss) +
                        (rate > 0 ? " " + fmt("%.0f", rate) + " samples/s" : ""));
      }
      if (progress.tty() && (step % 10 == 0 || step == total)) {
        const double elapsed = seconds_since(train0);
        progress.status("epoch " + std::to_string(epoch + 1) + "/" + std::to_string(epochs) +
                        "  step " + std::to_string(step) + "/" + std::to_string(total) +
                        "  loss " + fmt("%.4f", last_loss) + "  " + fmt("%.0f", rate) +
                        " samples/s  ETA " + format_duration(elapsed / step * (total - step)));
      }
    }
    if (saves && c.checkpoint_every == 0 && step < total && index == per_epoch) save(pos);
    evaluate_and_report(epoch, "epoch " + std::to_string(epoch + 1));
  }
  // A resumed run that had nothing left to train evaluates what it restored
  // and leaves the checkpoint as it is.
  const bool trained = step > start.step;
  if (!trained && c.evaluate && d.test.size() > 0 && (comm.rank() == 0 || engine->collective()))
    eval = engine->evaluate(d.test, batch);
  if (saves && trained) {
    const std::string file = save(pos);
    if (comm.rank() == 0) progress.line(rep.prefix + "checkpoint: " + file);
  }
  if (!c.export_file.empty()) {  // with how the inputs were normalised, for whoever runs them
    save_weights(*engine, c.export_file, parse_weight_dtype(c.export_dtype, "--export-dtype"),
                 normalization_metadata(norm), comm.rank() == 0);
    if (comm.rank() == 0) progress.line(rep.prefix + "weights: " + c.export_file);
  }
  // No rate when no step ran after the warm-up steps (--warmup-steps).
  const double rate = timed_s > 0 ? timed_samples / timed_s : 0;
  // The share of a step spent waiting for the next batch (its gathering,
  // augmentation and copy to the device beyond what overlapped the step).
  const double data_wait = timed_s > 0 ? timed_data_s / (timed_s + timed_data_s) : 0;
  const double wall = seconds_since(wall0);
  const std::size_t tokens = d.train.label_width;  // labels per sample: a language model's tokens
  if (rep.writes_metrics)
    metrics.write({{"steps", step},
                   {"final_loss", trained ? nlohmann::json(last_loss) : nlohmann::json()},
                   {"ranks", comm.size()},
                   {"samples_per_sec", rate > 0 ? nlohmann::json(rate) : nlohmann::json()},
                   {"tokens_per_sec", rate > 0 && tokens > 1 ? nlohmann::json(rate * tokens)
                                                             : nlohmann::json()},
                   {"data_wait_fraction", timed_s > 0 ? nlohmann::json(data_wait) : nlohmann::json()},
                   {"wall_s", wall}});
  if (!rep.active) return;
  std::string result = rep.prefix + "done: " + std::to_string(step) + " steps";
  result += trained ? ", final loss " + fmt("%.6f", last_loss) : " (none run now)";
  if (c.evaluate && d.test.size() > 0 && comm.rank() == 0) {
    if (d.test.is_classification()) result += ", test accuracy " + fmt("%.4f", eval.accuracy);
    if (!d.test.is_classification() || tokens > 1) result += ", test loss " + fmt("%.6f", eval.loss);
  }
  if (rate > 0)
    result += ", " + fmt("%.0f", rate) + " samples/s" +
              (tokens > 1 ? " (" + fmt("%.0f", rate * tokens) + " tokens/s)" : "") + " (" +
              fmt("%.1f", 100 * data_wait) + "% waiting for data)";
  else if (trained)
    result += ", samples/s n/a (" + std::to_string(step - first_step) +
              " step(s), all of them warm-up: --warmup-steps " + std::to_string(c.warmup_steps) + ")";
  result += ", " + fmt("%.1f", wall) + " s";
  std::cout << result << std::endl;
  if (rep.writes_metrics && !c.metrics.empty()) {  // run.jsonl -> run.png
    std::string png = c.metrics;
    const auto dot = png.rfind('.'), slash = png.rfind('/');
    if (dot != std::string::npos && (slash == std::string::npos || dot > slash + 1)) png.resize(dot);
    std::cout << rep.prefix << "plot it: strata-plot " << c.metrics << " -o " << png << ".png"
              << std::endl;
  }
}

int train(const TrainConfig& c, comm::Communicator& world) {
  if (c.strategy == "plan") {  // the planner's layout, as explicit options
    STRATA_REQUIRE(c.ranks == 1 || world.size() == 1, config,
                   "--strategy plan runs on thread ranks of one process or on MPI processes "
                   "with one rank each; not on --ranks ", c.ranks, " x ", world.size(),
                   " processes");
    std::string summary;
    const TrainConfig planned = planned_config(c, model_spec(c), c.ranks * world.size(), &summary);
    if (world.rank() == 0) std::cout << summary << std::endl;
    return train(planned, world);
  }
  wait_policy_hint(c, world);
  // --comm: the name asked for must fit the ranks started (auto always does).
  const std::string chosen = comm::resolve_communicator(c.comm, c.ranks, world.size());
  const bool multi = c.ranks > 1 || world.size() > 1;
  STRATA_REQUIRE(!(c.strategy == "local" && multi), config,
                 "--strategy local runs one rank, but ", c.ranks * world.size(),
                 " ranks were requested (use --strategy dp)");
  STRATA_REQUIRE(c.accumulate == 1 || c.strategy != "local", config,
                 "--accumulate needs --strategy dp (or auto)");
  // Meshes split the world; thread ranks inside several MPI processes form a
  // hierarchical communicator, which cannot be split.
  STRATA_REQUIRE(!(model_parallel(c) && c.ranks > 1 && world.size() > 1), config,
                 "--strategy ", c.strategy, " with --pp/--tp/--zero runs on thread ranks of one "
                 "process or on MPI processes with one rank each; not on --ranks ", c.ranks,
                 " x ", world.size(), " processes");
  const ModelSpec model = model_spec(c);
  if (model_parallel(c))
    validate_mesh(engine_options(c, model, c.ranks * world.size()).mesh.mesh, c.ranks * world.size());
  // Without a mesh every rank is a data-parallel rank: --dp can only agree.
  STRATA_REQUIRE(model_parallel(c) || c.dp == 0 || c.dp == c.ranks * world.size(), config,
                 "--dp ", c.dp, " but ", c.ranks * world.size(), " rank(s) were started (without "
                 "--pp/--tp/--zero every rank is data parallel: start ", c.dp,
                 " with --ranks or mpirun -np)");
  // An unusable checkpoint directory fails now rather than after the first
  // stretch of training.
  if (!c.checkpoint_dir.empty() && world.rank() == 0) checkpoint::prepare_dir(c.checkpoint_dir);
  // So does an --export file that cannot be written (its temporary, tried now).
  if (!c.export_file.empty() && world.rank() == 0) {
    const std::string probe = c.export_file + ".tmp";
    const bool existed = static_cast<bool>(std::ifstream(probe));
    const bool ok = static_cast<bool>(std::ofstream(probe, std::ios::binary | std::ios::app));
    if (!existed) std::remove(probe.c_str());
    STRATA_REQUIRE(ok, runtime, "--export: cannot write '", c.export_file, "' (its directory "
                   "must exist and be writable; checked before training)");
  }
  data::Normalizer norm;  // what the inputs went through (exported with the weights)
  data::Split d = load_data(c, build_model<T>(model, c.seed), &norm);
  // Global rank 0 writes metrics; the file is opened before any rank starts.
  const bool root_process = world.rank() == 0;
  Metrics metrics(root_process ? c.metrics : std::string());
  if (!c.trace.empty()) {
    // Fail on an unwritable path now, not after training.
    std::ofstream probe(trace_path(c.trace, world), std::ios::app);
    STRATA_REQUIRE(probe.good(), config, "--trace: cannot write '", trace_path(c.trace, world), "'");
    trace::start();
  }
  if (!c.kernel_shapes.empty()) {
    std::ofstream probe(c.kernel_shapes, std::ios::app);
    STRATA_REQUIRE(probe.good(), config, "--kernel-shapes: cannot write '", c.kernel_shapes, "'");
    kernel_shapes::start();
  }
  auto body = [&](Context& ctx, comm::Communicator& comm) {
    trace::set_lane(2 * comm.rank());
    if (trace::enabled()) {
      trace::name_lane(2 * comm.rank(), "rank " + std::to_string(comm.rank()));
      trace::name_lane(2 * comm.rank() + 1, "rank " + std::to_string(comm.rank()) + " comm");
    }
    Reporter rep{comm.rank() == 0 || c.verbose_ranks, comm.rank() == 0,
                 c.verbose_ranks ? "[rank " + std::to_string(comm.rank()) + "] " : ""};
    train_rank(c, model, d, norm, ctx, comm, rep, metrics);
  };
  auto finish = [&] {
    if (!c.trace.empty()) trace::write(trace_path(c.trace, world), world.rank());
    if (!c.kernel_shapes.empty()) {
      kernel_shapes::stop();
      if (root_process) kernel_shapes::write(c.kernel_shapes);
    }
    return exit_ok;
  };
  if (c.ranks == 1) {
    Context ctx(gemm_backend(c));
    if (chosen == "nccl") {  // over the processes' world, on the kernels' stream
      auto devices = comm::device_backend()->create(world, device::stream_of(ctx.exec));
      body(ctx, *devices);
    } else {
      body(ctx, world);
    }
    return finish();
  }
  run_ranks(c.ranks, std::max(1, ctx_threads_per_rank(c)), [&](Context& ctx, comm::Communicator& local) {
    Context mine(gemm_backend(c), ctx.exec);
    if (world.size() == 1) {
      body(mine, local);
    } else {
      comm::HierarchicalComm h(local, local.rank() == 0 ? &world : nullptr);
      body(mine, h);
    }
  });
  return finish();
}

}  // namespace
}  // namespace strata::app

int main(int argc, char** argv) {
  using namespace strata::app;
  std::unique_ptr<strata::Runtime> runtime;
  std::unique_ptr<strata::comm::Communicator> world;
  const int code = guarded("strata-train", [&] {
    auto args = split_kokkos_args(argc, argv);
    auto config = parse_train_args(args.program);
    if (!config) return exit_ok;
    if (config->describe) {  // the layer table; nothing is allocated or trained
      const strata::ModelSpec spec = model_spec(*config);
      std::cout << "model " << (spec.name.empty() ? spec.source : spec.name + " (" + spec.source + ")")
                << "\n";
      auto model = strata::build_model<float>(spec, config->seed);
      if (config->recompute) model.set_recompute(true);
      std::cout << model.describe();
      return exit_ok;
    }
    // Kokkos gets ranks x threads-per-rank host threads unless told otherwise.
    STRATA_REQUIRE(config->threads == 0 || !has_kokkos_threads_option(args.kokkos), config,
                   "--threads and --kokkos-threads (--kokkos-num-threads) both set the threads; "
                   "give one (--threads counts per rank)");
    std::string threads;
    if (!has_kokkos_threads_option(args.kokkos)) {
      threads = strata::kokkos_threads_option(config->ranks * threads_per_rank(*config));
      args.kokkos.insert(args.kokkos.end() - 1, threads.data());
    }
    int kargc = static_cast<int>(args.kokkos.size()) - 1;
#if STRATA_HAS_NCCL
    strata::comm::use_device_backend(strata::comm::nccl_backend());
#endif
    runtime = std::make_unique<strata::Runtime>(kargc, args.kokkos.data(), config->device);
    world = strata::world_communicator();
    const int rc = train(*config, *world);
    world.reset();
    return rc;
  });
  // A failure on one MPI process must not leave the others waiting.
  if (code != exit_ok && world && world->size() > 1) strata::Runtime::abort(code);
  world.reset();
  runtime.reset();
  return code;
}
