// strata-train: trains a model (a model file, or the MLP of --layers) on
// Fashion-MNIST, a CSV file or synthetic data with the strategy the options
// ask for (strategies/engine.hpp), and reports the loss, the test accuracy
// and the speed.
#include "apps/common/app_main.hpp"
#include "apps/common/progress.hpp"
#include "apps/train/train_config.hpp"
#include "backends/runtime.hpp"
#include "backends/trace.hpp"
#include "data/loader.hpp"
#include "backends/comm/hierarchical.hpp"
#include "backends/ranks.hpp"
#include "layers/registry.hpp"
#include "strategies/engine.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
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

// Appends JSON lines to the --metrics file; a no-op without one.
class Metrics {
 public:
  explicit Metrics(const std::string& path) : path_(path) {
    if (path.empty()) return;
    out_.open(path, std::ios::trunc);
    STRATA_REQUIRE(out_.good(), config, "--metrics: cannot open '", path, "' for writing");
  }
  void write(const nlohmann::json& j) {
    if (!out_.is_open()) return;
    out_ << j.dump() << "\n";
    out_.flush();
    STRATA_REQUIRE(out_.good(), runtime, "--metrics: write to '", path_, "' failed");
  }

 private:
  std::string path_;
  std::ofstream out_;
};

// Processes of this job on this node, from the launcher's environment.
int local_processes() {
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE",
                        "MV2_COMM_WORLD_LOCAL_SIZE"})
    if (const char* s = std::getenv(v)) return std::max(1, std::atoi(s));
  return 1;
}

// --threads, or the node's cores shared by its processes and thread ranks.
int threads_per_rank(const TrainConfig& c) {
  if (c.threads > 0) return c.threads;
  if (const char* omp = std::getenv("OMP_NUM_THREADS"))
    return std::max(1, std::atoi(omp) / c.ranks);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / (c.ranks * local_processes()));
}

int ctx_threads_per_rank(const TrainConfig& c) {
  return std::max(1, strata::kokkos_host_threads() / c.ranks);
}

bool has_kokkos_threads_option(const std::vector<char*>& kokkos_args) {
  for (const char* a : kokkos_args)
    if (a && (std::strncmp(a, "--kokkos-threads", 16) == 0 ||
              std::strncmp(a, "--kokkos-num-threads", 20) == 0))
      return true;
  return false;
}

// `model`: the single-rank model (not built), for its input and output shapes.
data::Split load_data(const TrainConfig& c, const Sequential<T>& model) {
  const std::size_t in = model.in_features(), out = model.out_features();
  // How errors name the model's ends.
  const std::string first = c.model_file.empty()
                                ? "--layers starts with width " + std::to_string(in)
                                : "the model of " + c.model_file + " takes inputs of shape " +
                                      model.shape(0).str() + " (" + std::to_string(in) + " values)";
  const std::string last = c.model_file.empty()
                               ? "--layers ends with width " + std::to_string(out)
                               : "the model of " + c.model_file + " has outputs of shape " +
                                     model.shape(model.num_layers()).str();
  const auto task = c.loss == LossKind::cross_entropy ? data::CsvTask::classification
                                                       : data::CsvTask::regression;
  data::Split s;
  Normalize norm = c.normalize;
  if (c.dataset == "fashion-mnist") {
    s = data::load_fashion_mnist(c.data_dir.empty() ? data::default_fashion_mnist_dir()
                                                    : c.data_dir);
    if (norm == Normalize::automatic) norm = Normalize::global;
  } else if (c.dataset == "synthetic") {
    STRATA_REQUIRE(c.samples >= 2 || c.test_fraction == 0, config,
                   "--samples must be at least 2 to hold out a test set");
    s = data::split_tail(
        data::make_synthetic(c.samples, in, task, out, c.seed), c.evaluate ? c.test_fraction : 0.0);
    if (norm == Normalize::automatic) norm = Normalize::none;
  } else {
    const std::string path = c.dataset.substr(4);
    s = data::split_tail(data::read_csv(path, task, 0, out), c.evaluate ? c.test_fraction : 0.0);
    if (norm == Normalize::automatic) norm = Normalize::per_feature;
  }
  if (norm != Normalize::none) {
    const auto n = data::Normalizer::fit(s.train, norm == Normalize::per_feature);
    n.apply(s.train);
    if (s.test.size() > 0) n.apply(s.test);
  }
  // The model must fit the data.
  STRATA_REQUIRE(s.train.features == in, config, first, " but ",
                 s.train.name, " has ", s.train.features, " features per sample",
                 task == data::CsvTask::regression && c.dataset.rfind("csv:", 0) == 0
                     ? " (with --loss mse the last " + std::to_string(out) +
                           " columns of the CSV are the targets: as many as the output width)"
                     : std::string());
  if (task == data::CsvTask::classification) {
    STRATA_REQUIRE(s.train.classes <= out, config, last, " but ",
                   s.train.name, " has ", s.train.classes,
                   " classes (the output layer needs one output per class)");
  } else {
    STRATA_REQUIRE(s.train.target_width == out, config, last, " but ", s.train.name, " has targets of width ", s.train.target_width);
  }
  return s;
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

GemmBackend gemm_backend(const TrainConfig& c) {
  if (c.gemm == "portable") return GemmBackend::portable;
  if (c.gemm == "vendor" || Blas::vendor_available()) return GemmBackend::vendor;
  return GemmBackend::portable;
}

// What must match for a checkpoint to be resumed by this configuration.
// The model itself is compared tensor by tensor (strategies/checkpoint_state.hpp);
// an MLP's options are compared too, as Strata 0.1's checkpoints hold them.
std::string checkpoint_config(const TrainConfig& c) {
  nlohmann::json j{{"format", "strata-train"},
                   {"dataset", c.dataset},
                   {"loss", to_string(c.loss)},
                   {"optimizer", to_string(c.optimizer.kind)},
                   {"batch_size", c.batch_size},
                   {"accumulate", c.accumulate},
                   {"shuffle", c.shuffle},
                   {"seed", c.seed}};
  if (c.model_file.empty()) {
    j["layers"] = c.layers;
    j["activation"] = to_string(c.activation);
    j["dropout"] = c.dropout;
  }
  return j.dump();
}

// --precision, --clip-grad-norm and --loss-scale, for either strategy.
void set_mixed_precision(const TrainConfig& c, MixedPrecisionOptions& o) {
  o.precision = c.precision;
  o.clip_grad_norm = c.clip_grad_norm;
  o.loss_scaling = c.loss_scale == "dynamic" || (c.loss_scale == "auto" && c.precision == Precision::fp16);
  o.scaler.growth_interval = c.loss_scale_growth_interval;
}

// The mesh of a configuration on `world` ranks: the factors given, the
// strategy's default for the others, and the data-parallel factor last.
MeshShape mesh_shape(const TrainConfig& c, int world) {
  MeshShape m;
  m.pp = c.pp > 0 ? c.pp : c.strategy == "pipeline" && c.dp == 0 ? world : 1;
  m.tp = c.tp > 0 ? c.tp : c.strategy == "tensor" && c.dp == 0 ? world : 1;
  if (c.dp > 0) {
    m.dp = c.dp;
  } else {
    STRATA_REQUIRE(world % (m.pp * m.tp) == 0, config, "--pp ", m.pp, " x --tp ", m.tp, " = ",
                   m.pp * m.tp, " does not divide the ", world, " ranks");
    m.dp = world / (m.pp * m.tp);
  }
  return m;
}

// What the strategy gets: the model, the optimizer and the parallel layout.
EngineOptions engine_options(const TrainConfig& c, const ModelSpec& model, int world) {
  EngineOptions o;
  o.model = model;
  o.init = c.init;
  o.seed = c.seed;
  o.loss = c.loss;
  o.optimizer = c.optimizer;
  o.model_parallel = model_parallel(c);
  o.recompute = c.recompute;
  o.data.bucket_bytes = static_cast<std::size_t>(c.bucket_mb * 1024 * 1024);
  o.data.overlap = c.overlap;
  o.data.compression = parse_grad_compression(c.grad_compression);
  set_mixed_precision(c, o.data);
  if (o.model_parallel) {
    ModelParallelOptions& m = o.mesh;
    m.mesh = mesh_shape(c, world);
    m.micro_batches = c.micro_batches > 0 ? c.micro_batches : 2 * static_cast<std::size_t>(m.mesh.pp);
    m.schedule = parse_schedule(c.schedule);
    m.cuts = c.stage_cuts;
    m.balance = parse_balance(c.balance);
    m.zero = c.zero;
    m.memory_budget = static_cast<std::size_t>(c.memory_budget_mb * 1024 * 1024);
    set_mixed_precision(c, m);
  }
  return o;
}

// Fault injection for tests of failure handling: STRATA_FAULT=RANK:STEP makes
// global rank RANK fail after STEP steps: a thread rank throws; with MPI (one
// rank per process) the process kills itself with SIGKILL, as a lost node would.
struct Fault {
  int rank = -1;
  std::size_t step = 0;
  bool kill_process = false;
  static Fault from_environment(bool kill_process) {
    Fault f;
    f.kill_process = kill_process;
    if (const char* e = std::getenv("STRATA_FAULT")) {
      const char* colon = std::strchr(e, ':');
      STRATA_REQUIRE(colon != nullptr, config, "STRATA_FAULT='", e, "': expected RANK:STEP");
      f.rank = std::atoi(e);
      f.step = static_cast<std::size_t>(std::atoll(colon + 1));
    }
    return f;
  }
  void maybe_fail(int rank_now, std::size_t step_now) const {
    if (rank_now != rank || step_now != step) return;
    if (kill_process) {
      std::fprintf(stderr, "strata-train: STRATA_FAULT: killing rank %d at step %zu\n", rank, step);
      std::fflush(stderr);
      ::raise(SIGKILL);
    }
    STRATA_THROW(runtime, "STRATA_FAULT: injected failure of rank ", rank, " at step ", step);
  }
};

// Trains on one rank of `comm` (all ranks run this).
void train_rank(const TrainConfig& c, const ModelSpec& model, const data::Split& d, Context& ctx,
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
  // One loader per micro-batch of an optimizer step (each keeps its batch alive).
  std::vector<std::unique_ptr<data::BatchLoader<T>>> loaders;
  for (std::size_t m = 0; m < c.accumulate; ++m)
    loaders.push_back(std::make_unique<data::BatchLoader<T>>(
        d.train, batch, c.shuffle, c.seed, false, engine->data_rank(), engine->data_ranks()));
  const std::size_t per_epoch = loaders[0]->batches_per_epoch();  // micro-batches
  const std::size_t steps_per_epoch = (per_epoch + c.accumulate - 1) / c.accumulate;
  const std::size_t total = c.steps > 0 ? c.steps : c.epochs * steps_per_epoch;
  const std::size_t epochs = (total + steps_per_epoch - 1) / steps_per_epoch;
  progress.line(rep.prefix + build_summary() + ", " + std::to_string(comm.size()) + " rank(s) (" +
                comm.name() + "), " + std::to_string(ctx.threads) + " thread(s) per rank");
  if (!resume_file.empty())
    progress.line(rep.prefix + "resumed from " + resume_file + " at step " +
                  std::to_string(start.step) + " (epoch " + std::to_string(start.epoch + 1) + ")");
  progress.line(rep.prefix + "strategy: " + engine->describe());
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
  double timed_s = 0, last_loss = 0;
  Evaluation eval;
  const auto train0 = Clock::now();
  const bool saves = !c.checkpoint_dir.empty();
  const CheckpointTarget target{c.checkpoint_dir, c.keep_checkpoints, checkpoint_config(c)};
  auto save = [&](const Position& p) { return engine->save(target, p); };
  Position pos = start;
  const Fault fault = Fault::from_environment(comm.name() == "mpi");
  std::vector<data::Batch<T>> micro(c.accumulate);
  for (std::size_t epoch = start.epoch; epoch < epochs && step < total; ++epoch) {
    std::size_t index = epoch == start.epoch ? start.index : 0;
    while (step < total && index < per_epoch) {
      // The micro-batches of this step (the last step of an epoch may have fewer).
      const std::size_t k = std::min(c.accumulate, per_epoch - index);
      micro.resize(k);
      std::size_t global = 0;
      for (std::size_t m = 0; m < k; ++m) {
        STRATA_SPAN("data", "next batch");
        loaders[m]->seek(epoch, index++);
        loaders[m]->next(micro[m]);
        global += loaders[m]->global_size();
      }
      const auto t0 = Clock::now();
      last_loss = engine->step(micro, global);
      ++step;
      if (!std::isfinite(last_loss)) {
        const std::string origin = engine->first_nonfinite();
        STRATA_THROW(runtime, "training diverged: the loss is ", last_loss, " at step ", step,
                     " (epoch ", epoch + 1, ")",
                     origin.empty() ? std::string() : "; the first non-finite values are in " + origin,
                     "; try a smaller --lr");
      }
      fault.maybe_fail(comm.rank(), step);
      // Where the next step starts.
      pos = index == per_epoch ? Position{step, epoch + 1, 0} : Position{step, epoch, index};
      if (saves && c.checkpoint_every > 0 && step % c.checkpoint_every == 0 && step < total)
        save(pos);
      if (step > first_step + c.warmup_steps) {
        timed_s += seconds_since(t0);
        timed_samples += global;
      }
      const bool log = c.log_every > 0 && (step % c.log_every == 0 || step == total);
      const double rate = timed_s > 0 ? timed_samples / timed_s : 0;
      if (log) {
        if (rep.writes_metrics)
          metrics.write({{"step", step}, {"epoch", epoch + 1}, {"loss", last_loss}});
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
    // Data parallel: every rank holds the same parameters, rank 0 evaluates
    // and the others go on (they wait for it in the next step's
    // collectives). Model parallel: every rank takes part.
    if (c.evaluate && d.test.size() > 0 && (comm.rank() == 0 || engine->collective()))
      eval = engine->evaluate(d.test, batch);
    if (c.evaluate && d.test.size() > 0 && comm.rank() == 0) {
      nlohmann::json j{{"step", step}, {"epoch", epoch + 1}};
      std::string text = "epoch " + std::to_string(epoch + 1) + ": ";
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
    }
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
  // No rate when no step ran after the warm-up steps (--warmup-steps).
  const double rate = timed_s > 0 ? timed_samples / timed_s : 0;
  const double wall = seconds_since(wall0);
  if (rep.writes_metrics)
    metrics.write({{"steps", step},
                   {"final_loss", trained ? nlohmann::json(last_loss) : nlohmann::json()},
                   {"ranks", comm.size()},
                   {"samples_per_sec", rate > 0 ? nlohmann::json(rate) : nlohmann::json()},
                   {"wall_s", wall}});
  if (!rep.active) return;
  std::string result = rep.prefix + "done: " + std::to_string(step) + " steps";
  result += trained ? ", final loss " + fmt("%.6f", last_loss) : " (none run now)";
  if (c.evaluate && d.test.size() > 0 && comm.rank() == 0)
    result += d.test.is_classification() ? ", test accuracy " + fmt("%.4f", eval.accuracy)
                                         : ", test loss " + fmt("%.6f", eval.loss);
  if (rate > 0)
    result += ", " + fmt("%.0f", rate) + " samples/s";
  else if (trained)
    result += ", samples/s n/a (" + std::to_string(step - first_step) +
              " step(s), all of them warm-up: --warmup-steps " + std::to_string(c.warmup_steps) + ")";
  result += ", " + fmt("%.1f", wall) + " s";
  std::cout << result << std::endl;
}

// --trace PATH, or PATH with -rankN before .json for each MPI process.
std::string trace_path(const std::string& path, const comm::Communicator& world) {
  if (world.size() == 1) return path;
  const std::string suffix = "-rank" + std::to_string(world.rank());
  const auto dot = path.rfind(".json");
  return dot == std::string::npos ? path + suffix : path.substr(0, dot) + suffix + ".json";
}

// GNU OpenMP threads (Kokkos' and OpenBLAS's) spin while they wait for work,
// which is fastest on a machine of one's own and ruinous on a busy one (a
// 2-thread W2 run lost half its speed next to a compilation; a 4-process
// test on 2 cores ran 100x slower). The policy is read when the OpenMP
// runtime loads, before main: all strata-train can do is say so.
void wait_policy_hint(const TrainConfig& c, const comm::Communicator& world) {
#ifdef KOKKOS_ENABLE_OPENMP
  if (c.quiet || world.rank() != 0 || std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = c.ranks * threads_per_rank(c) * local_processes();
  double load = 0;
  std::ifstream("/proc/loadavg") >> load;
  if (threads <= cores && load < cores - 0.5) return;
  std::cerr << "strata-train: note: " << threads << " OpenMP threads on " << cores
            << " cores, load average " << fmt("%.1f", load)
            << "; waiting OpenMP threads spin and slow each other down on a busy machine. "
               "Start with OMP_WAIT_POLICY=PASSIVE to let them sleep (it must be set before "
               "strata-train starts).\n";
#else
  (void)c;
  (void)world;
#endif
}

int train(const TrainConfig& c, comm::Communicator& world) {
  wait_policy_hint(c, world);
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
  if (model_parallel(c)) validate_mesh(mesh_shape(c, c.ranks * world.size()), c.ranks * world.size());
  // Without a mesh every rank is a data-parallel rank: --dp can only agree.
  STRATA_REQUIRE(model_parallel(c) || c.dp == 0 || c.dp == c.ranks * world.size(), config,
                 "--dp ", c.dp, " but ", c.ranks * world.size(), " rank(s) were started (without "
                 "--pp/--tp/--zero every rank is data parallel: start ", c.dp,
                 " with --ranks or mpirun -np)");
  // An unusable checkpoint directory fails now rather than after the first
  // stretch of training.
  if (!c.checkpoint_dir.empty() && world.rank() == 0) checkpoint::prepare_dir(c.checkpoint_dir);
  const ModelSpec model = model_spec(c);
  data::Split d = load_data(c, build_model<T>(model, c.seed));
  // Global rank 0 writes metrics; the file is opened before any rank starts.
  const bool root_process = world.rank() == 0;
  Metrics metrics(root_process ? c.metrics : std::string());
  if (!c.trace.empty()) {
    // Fail on an unwritable path now, not after training.
    std::ofstream probe(trace_path(c.trace, world), std::ios::app);
    STRATA_REQUIRE(probe.good(), config, "--trace: cannot write '", trace_path(c.trace, world), "'");
    trace::start();
  }
  auto body = [&](Context& ctx, comm::Communicator& comm) {
    trace::set_lane(2 * comm.rank());
    if (trace::enabled()) {
      trace::name_lane(2 * comm.rank(), "rank " + std::to_string(comm.rank()));
      trace::name_lane(2 * comm.rank() + 1, "rank " + std::to_string(comm.rank()) + " comm");
    }
    Reporter rep{comm.rank() == 0 || c.verbose_ranks, comm.rank() == 0,
                 c.verbose_ranks ? "[rank " + std::to_string(comm.rank()) + "] " : ""};
    train_rank(c, model, d, ctx, comm, rep, metrics);
  };
  auto finish = [&] {
    if (!c.trace.empty()) trace::write(trace_path(c.trace, world), world.rank());
    return exit_ok;
  };
  if (c.ranks == 1) {
    Context ctx(gemm_backend(c));
    body(ctx, world);
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
    runtime = std::make_unique<strata::Runtime>(kargc, args.kokkos.data());
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
