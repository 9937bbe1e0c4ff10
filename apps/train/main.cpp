// strata-train: trains a multi-layer perceptron on Fashion-MNIST, a CSV file
// or synthetic data, and reports the loss, the test accuracy and the speed.
#include "apps/common/app_main.hpp"
#include "apps/common/progress.hpp"
#include "apps/train/train_config.hpp"
#include "backends/runtime.hpp"
#include "backends/trace.hpp"
#include "data/loader.hpp"
#include "layers/mlp.hpp"
#include "backends/comm/hierarchical.hpp"
#include "backends/ranks.hpp"
#include "strategies/checkpoint.hpp"
#include "strategies/data_parallel.hpp"
#include "strategies/local.hpp"
#include "strategies/model_parallel.hpp"

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

data::Split load_data(const TrainConfig& c) {
  const std::size_t in = c.layers.front(), out = c.layers.back();
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
  STRATA_REQUIRE(s.train.features == in, config, "--layers starts with width ", in, " but ",
                 s.train.name, " has ", s.train.features, " features per sample",
                 task == data::CsvTask::regression && c.dataset.rfind("csv:", 0) == 0
                     ? " (with --loss mse the last " + std::to_string(out) +
                           " columns of the CSV are the targets: as many as the output width)"
                     : std::string());
  if (task == data::CsvTask::classification) {
    STRATA_REQUIRE(s.train.classes <= out, config, "--layers ends with width ", out, " but ",
                   s.train.name, " has ", s.train.classes,
                   " classes (the output layer needs one output per class)");
  } else {
    STRATA_REQUIRE(s.train.target_width == out, config, "--layers ends with width ", out,
                   " but ", s.train.name, " has targets of width ", s.train.target_width);
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
std::string checkpoint_config(const TrainConfig& c) {
  return nlohmann::json{{"format", "strata-train"},
                        {"dataset", c.dataset},
                        {"layers", c.layers},
                        {"activation", to_string(c.activation)},
                        {"dropout", c.dropout},
                        {"loss", to_string(c.loss)},
                        {"optimizer", to_string(c.optimizer.kind)},
                        {"batch_size", c.batch_size},
                        {"accumulate", c.accumulate},
                        {"shuffle", c.shuffle},
                        {"seed", c.seed}}
      .dump();
}

std::vector<Dropout<T>*> dropouts(Sequential<T>& model) {
  std::vector<Dropout<T>*> d;
  for (std::size_t i = 0; i < model.num_layers(); ++i)
    if (auto* p = dynamic_cast<Dropout<T>*>(&model.layer(i))) d.push_back(p);
  return d;
}

template <class View>
std::vector<float> to_host_vector(const View& v) {
  std::vector<float> out(v.size());
  if (v.size() == 0) return out;
  Kokkos::deep_copy(Kokkos::View<float*, Kokkos::HostSpace, Unmanaged>(out.data(), out.size()), v);
  return out;
}

void from_host_vector(const std::vector<float>& in, Vector<T> v) {
  if (!in.empty())
    Kokkos::deep_copy(v, Kokkos::View<const float*, Kokkos::HostSpace, Unmanaged>(in.data(), in.size()));
}

// Position of a run, as a checkpoint stores it.
struct Position {
  std::size_t step = 0, epoch = 0, index = 0;  // index: next micro-batch in the epoch
};

// What a checkpoint holds besides configuration and position, in the
// single-rank layout whatever the strategy (so any strategy resumes any).
struct Snapshot {
  std::vector<float> params, opt0, opt1;
  std::int64_t optimizer_steps = 0;
  std::vector<std::uint64_t> dropout_calls;
  std::optional<DynamicLossScaler::State> scaler;  // fp16: dynamic loss scaling
};

// Dropout layers of the whole model.
std::size_t dropout_layers(const TrainConfig& c) {
  return c.dropout > 0 ? c.layers.size() - 2 : 0;
}

// Reads and verifies a checkpoint against this configuration.
std::pair<Snapshot, Position> load_checkpoint(const TrainConfig& c, const std::string& file,
                                              std::size_t num_params) {
  const auto ck = checkpoint::load(file);
  const auto want = nlohmann::json::parse(checkpoint_config(c));
  nlohmann::json have;
  try {
    have = nlohmann::json::parse(ck.config);
  } catch (const std::exception&) {
    STRATA_THROW(data, "checkpoint '", file, "': unreadable config section");
  }
  for (auto it = want.begin(); it != want.end(); ++it)
    STRATA_REQUIRE(have.contains(it.key()) && have[it.key()] == it.value(), config,
                   "checkpoint '", file, "' was written with ", it.key(), " = ",
                   have.contains(it.key()) ? have[it.key()].dump() : "nothing",
                   " but this run has ", it.key(), " = ", it.value().dump());
  Snapshot s;
  s.params = ck.params;
  s.opt0 = ck.opt0;
  s.opt1 = ck.opt1;
  for (const auto* v : {&s.params, &s.opt0, &s.opt1})
    STRATA_REQUIRE(v->size() == num_params || (v != &s.params && v->empty()), config,
                   "checkpoint '", file, "': ", v == &s.params ? "params" : "optimizer state",
                   " has ", v->size(), " values but this model needs ", num_params,
                   " (a checkpoint of another model?)");
  Position p;
  try {
    const auto st = nlohmann::json::parse(ck.state);
    p.step = st.at("step");
    p.epoch = st.at("epoch");
    p.index = st.at("index");
    s.optimizer_steps = st.at("optimizer_steps");
    s.dropout_calls = st.at("dropout_calls").get<std::vector<std::uint64_t>>();
    if (st.contains("loss_scaler")) {
      const auto& ls = st.at("loss_scaler");
      s.scaler = DynamicLossScaler::State{ls.at("scale").get<double>(),
                                          ls.at("good_steps").get<std::int64_t>(),
                                          ls.at("skipped").get<std::int64_t>()};
    }
  } catch (const nlohmann::json::exception& e) {
    STRATA_THROW(data, "checkpoint '", file, "': bad state section (", e.what(), ")");
  }
  STRATA_REQUIRE(s.dropout_calls.size() == dropout_layers(c), config, "checkpoint '", file, "': ",
                 s.dropout_calls.size(), " dropout layers, this model has ", dropout_layers(c));
  return {s, p};
}

// The checkpoint's configuration and state sections (its arrays are the
// snapshot's: empty for a sharded checkpoint's manifest).
checkpoint::State checkpoint_meta(const TrainConfig& c, const Position& p, const Snapshot& snap) {
  checkpoint::State s;
  s.config = checkpoint_config(c);
  nlohmann::json state{{"step", p.step},
                       {"epoch", p.epoch},
                       {"index", p.index},
                       {"optimizer_steps", snap.optimizer_steps},
                       {"dropout_calls", snap.dropout_calls}};
  if (snap.scaler)
    state["loss_scaler"] = {{"scale", snap.scaler->scale},
                            {"good_steps", snap.scaler->good_steps},
                            {"skipped", snap.scaler->skipped}};
  s.state = state.dump();
  return s;
}

// --precision, --clip-grad-norm and --loss-scale, for either strategy.
void set_mixed_precision(const TrainConfig& c, MixedPrecisionOptions& o) {
  o.precision = c.precision;
  o.clip_grad_norm = c.clip_grad_norm;
  o.loss_scaling = c.loss_scale == "dynamic" || (c.loss_scale == "auto" && c.precision == Precision::fp16);
  o.scaler.growth_interval = c.loss_scale_growth_interval;
}

std::string describe_mixed_precision(const MixedPrecisionOptions& o) {
  std::string s;
  if (o.precision != Precision::fp32)
    s += std::string(", ") + to_string(o.precision) +
         " activations (16-bit storage), working weights rounded to " + to_string(o.precision) +
         ", fp32 master weights";
  if (o.loss_scaling) s += ", dynamic loss scaling";
  if (o.clip_grad_norm > 0) s += ", gradients clipped to norm " + fmt("%g", o.clip_grad_norm);
  return s;
}

// The strategy train_rank drives: DataParallel (one rank is local training)
// or ModelParallel (pipeline, tensor parallelism, ZeRO-1, meshes).
class Engine {
 public:
  virtual ~Engine() = default;
  virtual std::string describe() const = 0;
  virtual std::size_t num_params() const = 0;  // of the whole model
  // Which shard of each global batch this rank loads.
  virtual int data_rank() const = 0;
  virtual int data_ranks() const = 0;
  virtual double step(const std::vector<data::Batch<T>>& micro, std::size_t global) = 0;
  virtual std::string first_nonfinite() = 0;
  // Collective engines: every rank calls evaluate(); else only rank 0.
  virtual bool collective() const = 0;
  virtual Evaluation evaluate(const data::Dataset& d, std::size_t batch) = 0;
  // Writes the checkpoint of position p into c.checkpoint_dir (every rank
  // calls it); returns its file on rank 0.
  virtual std::string save(const TrainConfig& c, const Position& p) = 0;
  virtual void restore(const Snapshot& s) = 0;
};

class DataParallelEngine final : public Engine {
 public:
  DataParallelEngine(const TrainConfig& c, Context& ctx, comm::Communicator& comm,
                     std::size_t batch)
      : ctx_(ctx),
        comm_(comm),
        model_(make_mlp<T>({c.layers, c.activation, c.dropout, c.seed})),
        loss_(make_loss<T>(c.loss)) {
    // 16-bit activation storage from the start (DataParallel would set it
    // after build and allocate the activations again).
    if (c.precision != Precision::fp32) model_.set_storage(c.precision);
    // The largest shard of a global batch (the first ranks take the remainder).
    model_.build(std::max<std::size_t>(1, data::BatchLoader<T>::shard(batch, 0, comm.size()).second));
    model_.init(c.init, c.seed);
    optimizer_ = std::make_unique<Optimizer<T>>(c.optimizer, model_.num_params());
    DataParallelOptions o;
    o.bucket_bytes = static_cast<std::size_t>(c.bucket_mb * 1024 * 1024);
    o.overlap = c.overlap;
    o.compression = parse_grad_compression(c.grad_compression);
    set_mixed_precision(c, o);
    strategy_ = std::make_unique<DataParallel<T>>(ctx, comm, model_, *loss_, *optimizer_, o);
  }
  std::string describe() const override {
    std::string s = comm_.size() == 1 ? "local (one rank)"
                                      : "data parallel over " + std::to_string(comm_.size()) + " ranks";
    const auto& o = strategy_->options();
    s += describe_mixed_precision(o);
    if (o.compression != GradCompression::none)
      s += std::string(", gradients communicated in ") + to_string(o.compression);
    return s;
  }
  std::size_t num_params() const override { return model_.num_params(); }
  int data_rank() const override { return comm_.rank(); }
  int data_ranks() const override { return comm_.size(); }
  double step(const std::vector<data::Batch<T>>& micro, std::size_t global) override {
    return strategy_->step(micro, global);
  }
  std::string first_nonfinite() override { return model_.first_nonfinite(ctx_); }
  bool collective() const override { return false; }
  Evaluation evaluate(const data::Dataset& d, std::size_t batch) override {
    return strata::evaluate(ctx_, model_, *loss_, d, batch);
  }
  // Every rank holds the whole model: rank 0 writes one file.
  std::string save(const TrainConfig& c, const Position& p) override {
    if (comm_.rank() != 0) return std::string();
    Snapshot snap;
    snap.params = to_host_vector(strategy_->master_params());  // fp32 master weights
    snap.opt0 = to_host_vector(optimizer_->state0());
    snap.opt1 = to_host_vector(optimizer_->state1());
    snap.optimizer_steps = optimizer_->steps();
    for (auto* d : dropouts(model_)) snap.dropout_calls.push_back(d->calls());
    if (const DynamicLossScaler* scaler = strategy_->scaler()) snap.scaler = scaler->state();
    checkpoint::State s = checkpoint_meta(c, p, snap);
    s.params = std::move(snap.params);
    s.opt0 = std::move(snap.opt0);
    s.opt1 = std::move(snap.opt1);
    return checkpoint::save(c.checkpoint_dir, p.step, s, c.keep_checkpoints);
  }
  void restore(const Snapshot& s) override {
    from_host_vector(s.params, strategy_->master_params());
    strategy_->sync_working_params();
    from_host_vector(s.opt0, optimizer_->state0());
    from_host_vector(s.opt1, optimizer_->state1());
    optimizer_->set_steps(s.optimizer_steps);
    auto d = dropouts(model_);
    for (std::size_t i = 0; i < d.size(); ++i) d[i]->set_calls(s.dropout_calls.at(i));
    // A checkpoint without scaler state (of an fp32 run) leaves the scaler
    // at its initial scale.
    if (DynamicLossScaler* scaler = strategy_->scaler(); scaler && s.scaler)
      scaler->set_state(*s.scaler);
  }

 private:
  Context& ctx_;
  comm::Communicator& comm_;
  Sequential<T> model_;
  std::unique_ptr<Loss<T>> loss_;
  std::unique_ptr<Optimizer<T>> optimizer_;
  std::unique_ptr<DataParallel<T>> strategy_;
};

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

class ModelParallelEngine final : public Engine {
 public:
  ModelParallelEngine(const TrainConfig& c, Context& ctx, comm::Communicator& world,
                      std::size_t batch)
      : ctx_(ctx), world_(world), config_(c) {
    ModelParallelOptions o;
    o.mesh = mesh_shape(c, world.size());
    o.micro_batches = c.micro_batches > 0 ? c.micro_batches : 2 * static_cast<std::size_t>(o.mesh.pp);
    o.schedule = parse_schedule(c.schedule);
    o.cuts = c.stage_cuts;
    o.balance = parse_balance(c.balance);
    o.zero = c.zero;
    o.memory_budget = static_cast<std::size_t>(c.memory_budget_mb * 1024 * 1024);
    set_mixed_precision(c, o);
    validate_mesh(o.mesh, world.size());
    const std::size_t shard =
        std::max<std::size_t>(1, data::BatchLoader<T>::shard(batch, 0, o.mesh.dp).second);
    mp_ = std::make_unique<ModelParallel<T>>(ctx, world, MlpSpec{c.layers, c.activation, c.dropout, c.seed},
                                             c.init, c.seed, c.loss, c.optimizer, shard, o);
    options_ = o;
  }
  std::string describe() const override {
    std::string s = "mesh " + options_.mesh.str();
    if (options_.mesh.pp > 1)
      s += ", " + std::string(to_string(options_.schedule)) + " with " +
           std::to_string(options_.micro_batches) + " micro-batches, stage " +
           std::to_string(mp_->mesh().pp_rank()) + " holds layers " +
           std::to_string(mp_->stage_bounds()[mp_->mesh().pp_rank()]) + "-" +
           std::to_string(mp_->stage_bounds()[mp_->mesh().pp_rank() + 1] - 1);
    if (options_.zero) s += ", ZeRO-1";
    s += describe_mixed_precision(options_);
    return s + "; memory per rank: " + mp_->memory().str();
  }
  std::size_t num_params() const override {
    std::size_t n = 0;
    for (std::size_t i = 0; i + 1 < config_.layers.size(); ++i)
      n += config_.layers[i] * config_.layers[i + 1] + config_.layers[i + 1];
    return n;
  }
  int data_rank() const override { return mp_->mesh().dp_rank(); }
  int data_ranks() const override { return mp_->mesh().shape().dp; }
  double step(const std::vector<data::Batch<T>>& micro, std::size_t global) override {
    return mp_->step(micro.at(0), global);
  }
  std::string first_nonfinite() override {
    return "stage " + std::to_string(mp_->mesh().pp_rank()) + ": " +
           mp_->stage().first_nonfinite(ctx_);
  }
  bool collective() const override { return true; }
  Evaluation evaluate(const data::Dataset& d, std::size_t) override { return mp_->evaluate(d); }
  // Sharded: every rank writes the values it alone holds, rank 0 the
  // manifest; nothing is gathered.
  std::string save(const TrainConfig& c, const Position& p) override {
    Snapshot snap;
    snap.optimizer_steps = mp_->optimizer().steps();
    // Every dropout layer has drawn once per step: the calls of any.
    std::int64_t calls = 0;
    for (auto* d : dropouts(mp_->stage())) calls = static_cast<std::int64_t>(d->calls());
    calls = world_.allreduce_value(calls, comm::ReduceOp::max);
    snap.dropout_calls.assign(dropout_layers(config_), static_cast<std::uint64_t>(calls));
    // Every rank takes the same skip decisions: any rank's scaler will do.
    if (const DynamicLossScaler* scaler = mp_->scaler()) snap.scaler = scaler->state();
    auto part = mp_->checkpoint_shard();
    checkpoint::Shard mine;
    for (const auto& [offset, length] : part.ranges) mine.ranges.push_back({offset, length});
    mine.params = std::move(part.params);
    mine.opt0 = std::move(part.opt0);
    mine.opt1 = std::move(part.opt1);
    const std::string file =
        checkpoint::save_sharded(world_, c.checkpoint_dir, p.step, checkpoint_meta(c, p, snap),
                                 mp_->layout(), mp_->full_num_params(), mine, c.keep_checkpoints);
    return world_.rank() == 0 ? file : std::string();
  }
  void restore(const Snapshot& s) override {
    mp_->set_full_params(s.params);
    mp_->set_full_optimizer_state(0, s.opt0);
    mp_->set_full_optimizer_state(1, s.opt1);
    mp_->optimizer().set_steps(s.optimizer_steps);
    for (auto* d : dropouts(mp_->stage()))
      d->set_calls(s.dropout_calls.empty() ? 0 : s.dropout_calls.front());
    if (DynamicLossScaler* scaler = mp_->scaler(); scaler && s.scaler) scaler->set_state(*s.scaler);
  }

 private:
  Context& ctx_;
  comm::Communicator& world_;
  TrainConfig config_;
  ModelParallelOptions options_;
  std::unique_ptr<ModelParallel<T>> mp_;
};

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
void train_rank(const TrainConfig& c, const data::Split& d, Context& ctx,
                comm::Communicator& comm, const Reporter& rep, Metrics& metrics) {
  const auto wall0 = Clock::now();
  Progress progress(rep.active && !c.quiet);
  const std::size_t batch = std::min(c.batch_size, d.train.size());
  std::unique_ptr<Engine> engine;
  if (model_parallel(c))
    engine = std::make_unique<ModelParallelEngine>(c, ctx, comm, batch);
  else
    engine = std::make_unique<DataParallelEngine>(c, ctx, comm, batch);
  // Every rank restores the same checkpoint (it holds the whole model in
  // single-rank layout: any strategy and mesh resumes it).
  Position start;
  const std::string resume_file =
      !c.resume_from.empty() ? c.resume_from : c.resume ? checkpoint::latest(c.checkpoint_dir) : "";
  if (!resume_file.empty()) {
    auto [snapshot, position] = load_checkpoint(c, resume_file, engine->num_params());
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
  auto save = [&](const Position& p) { return engine->save(c, p); };
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
  data::Split d = load_data(c);
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
    train_rank(c, d, ctx, comm, rep, metrics);
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
