// strata-train: trains a model (a model file, or the MLP of --layers) on
// Fashion-MNIST, a CSV file or synthetic data with the strategy the options
// ask for (strategies/engine.hpp), and reports the loss, the test accuracy
// and the speed.
#include "apps/common/app_main.hpp"
#include "apps/common/progress.hpp"
#include "apps/train/fault.hpp"
#include "apps/train/metrics.hpp"
#include "apps/train/plan_profile.hpp"
#include "apps/train/setup.hpp"
#include "apps/train/train_config.hpp"
#include "backends/clock.hpp"
#include "backends/comm/registry.hpp"
#include "backends/ranks.hpp"
#include "backends/runtime.hpp"
#include "backends/trace.hpp"
#include "backends/world.hpp"
#include "layers/registry.hpp"
#include "strata_config.hpp"
#if STRATA_HAS_NCCL
#include "backends/comm/nccl.hpp"
#endif
#include "strategies/checkpoint.hpp"
#include "strategies/engine.hpp"
#include "training/trainer.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <iostream>
#include <memory>

namespace strata::app {
namespace {

using T = float;

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
  // Every rank restores the same checkpoint, or reads the same weights.
  Position start;
  std::string resume_file;
  const std::string init_note = restore_or_import(c, *engine, rep.prefix, &start, &resume_file);
  Trainer trainer(*engine, d, trainer_options(c, batch, d.train, resume_file), start, comm.rank());
  const std::size_t total = trainer.total_steps(), epochs = trainer.epochs();
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
  if (!resume_file.empty() && start.step == total)
    progress.line(rep.prefix + "nothing to train: the checkpoint is at step " +
                  std::to_string(start.step) + ", where this run ends (raise --steps or --epochs); "
                  "evaluating the restored model");

  TrainerHooks hooks;
  // A rank that is a process of its own dies as a lost node would.
  const Fault fault = Fault::from_environment(c.ranks == 1 && comm.size() > 1);
  hooks.after_step = [&](std::size_t step) { fault.maybe_fail(comm.rank(), step); };
  hooks.on_evaluation = [&](const EvalStats& e) {
    nlohmann::json j{{"step", e.step}, {"epoch", e.epoch + 1}, {"wall_s", seconds_since(wall0)}};
    std::string text = e.when + ": ";
    j["test_loss"] = e.result.loss;
    if (e.classification) {
      j["test_accuracy"] = e.result.accuracy;
      text += "test accuracy " + fmt("%.4f", e.result.accuracy) + ", test loss " +
              fmt("%.4f", e.result.loss);
    } else {
      text += "test loss " + fmt("%.6f", e.result.loss);
    }
    if (rep.writes_metrics) metrics.write(j);
    progress.line(rep.prefix + text);
  };
  hooks.on_step = [&](const StepStats& s) {
    const double rate = s.samples_per_sec;
    if (c.log_every > 0 && (s.step % c.log_every == 0 || s.step == total)) {
      if (rep.writes_metrics)
        metrics.write({{"step", s.step},
                       {"epoch", s.epoch + 1},
                       {"loss", s.loss},
                       {"lr", s.lr},
                       {"samples_per_sec", rate > 0 ? nlohmann::json(rate) : nlohmann::json()},
                       {"wall_s", seconds_since(wall0)}});
      if (!progress.tty())
        progress.line(rep.prefix + "epoch " + std::to_string(s.epoch + 1) + " step " +
                      std::to_string(s.step) + "/" + std::to_string(total) + " loss " +
                      fmt("%.6f", s.loss) + (rate > 0 ? " " + fmt("%.0f", rate) + " samples/s" : ""));
    }
    if (progress.tty() && (s.step % 10 == 0 || s.step == total))
      progress.status("epoch " + std::to_string(s.epoch + 1) + "/" + std::to_string(epochs) +
                      "  step " + std::to_string(s.step) + "/" + std::to_string(total) + "  loss " +
                      fmt("%.4f", s.loss) + "  " + fmt("%.0f", rate) + " samples/s  ETA " +
                      format_duration(s.elapsed_s / static_cast<double>(s.step) *
                                      static_cast<double>(total - s.step)));
  };
  const TrainResult r = trainer.fit(hooks);
  const std::size_t step = r.steps;
  const bool trained = r.trained;
  const double last_loss = r.last_loss;
  const Evaluation& eval = r.eval;
  if (!r.checkpoint.empty() && comm.rank() == 0) progress.line(rep.prefix + "checkpoint: " + r.checkpoint);
  if (!c.export_file.empty()) {  // with how the inputs were normalised, for whoever runs them
    save_weights(*engine, c.export_file, parse_weight_dtype(c.export_dtype, "--export-dtype"),
                 normalization_metadata(norm), comm.rank() == 0);
    if (comm.rank() == 0) progress.line(rep.prefix + "weights: " + c.export_file);
  }
  // No rate when no step ran after the warm-up steps (--warmup-steps).
  const double rate = r.samples_per_sec, data_wait = r.data_wait_fraction;
  const double wall = seconds_since(wall0);
  const std::size_t tokens = d.train.label_width;  // labels per sample: a language model's tokens
  if (rep.writes_metrics)
    metrics.write({{"steps", step},
                   {"final_loss", trained ? nlohmann::json(last_loss) : nlohmann::json()},
                   {"ranks", comm.size()},
                   {"samples_per_sec", rate > 0 ? nlohmann::json(rate) : nlohmann::json()},
                   {"tokens_per_sec", rate > 0 && tokens > 1 ? nlohmann::json(rate * tokens)
                                                             : nlohmann::json()},
                   {"data_wait_fraction", r.timed ? nlohmann::json(data_wait) : nlohmann::json()},
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
    result += ", samples/s n/a (" + std::to_string(step - r.first_step) +
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

// --dry-run: what a run checks before its first step, then a report; no
// engine is built and nothing is trained or written.
int dry_run(const TrainConfig& c, const ModelSpec& model, comm::Communicator& world,
            const std::string& communicator) {
  data::Normalizer norm;
  const data::Split d = load_data(c, build_model<T>(model, c.seed), &norm);
  const int ranks = c.ranks * world.size();
  const std::vector<std::string> report = dry_run_report(c, model, ranks);
  if (world.rank() != 0) return exit_ok;
  const auto say = [](const std::string& line) { std::cout << "dry run: " << line << std::endl; };
  say(build_summary() + ", " + std::to_string(ranks) + " rank(s) (" + communicator + ", " +
      std::to_string(world.size()) + " process(es) x " + std::to_string(c.ranks) +
      " thread rank(s)), " + std::to_string(ctx_threads_per_rank(c)) + " thread(s) per rank");
  say("model: " + (model.name.empty() ? model.source : model.name));
  for (const std::string& line : report) say(line);
  const std::size_t batch = std::min(c.batch_size, d.train.size());
  say("data: " + std::to_string(d.train.size()) + " training samples (" + d.train.name + "), " +
      std::to_string(d.test.size()) + " test samples, global batch " + std::to_string(batch) +
      (c.steps > 0 ? ", " + std::to_string(c.steps) + " steps"
                   : ", " + std::to_string(c.epochs) + " epoch(s)"));
  if (!c.resume_from.empty()) {
    say("resumes from " + c.resume_from);
  } else if (c.resume) {  // an earlier job may write it: a warning, with the run's error
    try {
      say("resumes from " + checkpoint::latest(c.checkpoint_dir));
    } catch (const Error& e) {
      say(std::string("warning: --resume: ") + e.what() + " (the run stops there unless an earlier "
          "job writes one first)");
    }
  }
  for (const std::string& note : option_notes(c, model)) say("note: " + note);
  say("checked; nothing was allocated, trained or written (without --dry-run it trains)");
  return exit_ok;
}

int train(const TrainConfig& c, comm::Communicator& world) {
  const ModelSpec model = model_spec(c);
  validate_layout(c, model, world.size());
  if (c.strategy == StrategyKind::plan) {  // the planner's layout, as explicit options
    std::string summary;
    const auto log = [&](const std::string& line) {
      if (world.rank() == 0) std::cout << line << std::endl;
    };
    const planner::MachineProfile profile =
        plan_profile(c.plan_profile, world, plan_request(c, model, c.ranks * world.size()), log);
    const TrainConfig planned = planned_config(c, model, profile, c.ranks * world.size(), &summary);
    if (world.rank() == 0) std::cout << summary << std::endl;
    return train(planned, world);
  }
  wait_policy_hint(c, world);
  // --comm: the name asked for must fit the ranks started (auto always does).
  const std::string chosen = comm::resolve_communicator(c.comm, c.ranks, world.size());
  if (c.dry_run) return dry_run(c, model, world, chosen);
  prepare_outputs(c, world);
  data::Normalizer norm;  // what the inputs went through (exported with the weights)
  data::Split d = load_data(c, build_model<T>(model, c.seed), &norm);
  // Global rank 0 writes metrics; the file is opened before any rank starts.
  Metrics metrics(world.rank() == 0 ? c.metrics : std::string());
  start_recording(c, world);
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
  run_world(world, chosen, c.ranks, ctx_threads_per_rank(c), gemm_backend(c), body);
  finish_recording(c, world);
  return exit_ok;
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
      describe_model(*config, std::cout);
      return exit_ok;
    }
    install_checkpoint_faults_from_environment();
    // Every communicator reads its timeout from the environment (CommOptions).
    if (config->collective_timeout_s > 0)
      setenv("STRATA_COMM_TIMEOUT", std::to_string(config->collective_timeout_s).c_str(), 1);
    // Kokkos gets ranks x threads-per-rank host threads unless told otherwise.
    std::string threads = kokkos_threads(*config, args.kokkos);  // alive while Kokkos starts
    if (!threads.empty()) args.kokkos.insert(args.kokkos.end() - 1, threads.data());
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
