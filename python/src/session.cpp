#include "python/src/session.hpp"

#include "apps/train/plan_profile.hpp"
#include "apps/train/setup.hpp"
#include "backends/comm/hierarchical.hpp"
#include "backends/comm/progress.hpp"
#include "backends/host_error.hpp"
#include "backends/runtime.hpp"
#include "backends/world.hpp"
#include "data/loader.hpp"
#include "strategies/checkpoint.hpp"
#include "layers/lr_schedule.hpp"
#include "layers/registry.hpp"

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <type_traits>

namespace strata::python {

namespace {
// Whether the engines' memory is the host's (batches are then read in place).
constexpr bool host_memory = Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible;
}  // namespace

// One rank of this process: its context, communicator and engine, and the
// device copies of its batch (GPU builds).
struct Session::Rank {
  std::unique_ptr<Context> ctx;
  comm::Communicator* comm = nullptr;  // this rank in the whole run
  int local = 0;                        // its thread rank in this process
  // Thread ranks of MPI processes: this rank in the world of all of them.
  std::unique_ptr<comm::HierarchicalComm> world;
  std::unique_ptr<Engine> engine;
  MatrixBuffer<float> x, values;
  LabelsBuffer labels;
};

Session::Session(const std::vector<std::string>& args) {
  for (const std::string& a : args)
    STRATA_REQUIRE(a != "--help" && a != "-h" && a != "--version" && a != "--describe", config,
                   "option ", a, " prints and exits in strata-train; a Trainer has describe() and "
                   "strata.build_info() instead");
  std::optional<app::TrainConfig> parsed = app::parse_train_args(args);
  STRATA_REQUIRE(parsed.has_value(), config, "no training configuration in the options given");
  config_ = *parsed;
  world_ = world_communicator();
  model_ = app::model_spec(config_);
  app::validate_layout(config_, model_, world_->size());
  if (config_.strategy == StrategyKind::plan) {  // the planner's layout, as explicit options
    std::string summary;
    const auto log = [&](const std::string& line) {
      if (world_->rank() == 0 && !config_.quiet) std::cout << line << std::endl;
    };
    const planner::MachineProfile profile = app::plan_profile(
        config_.plan_profile, *world_, app::plan_request(config_, model_, config_.ranks * world_->size()), log);
    config_ = app::planned_config(config_, model_, profile, config_.ranks * world_->size(), &summary);
    log(summary);
  }
  {
    const Sequential<float> m = build_model<float>(model_, config_.seed);
    features_ = m.in_features();
    const Shape out = m.shape(m.num_layers());
    if (config_.loss == LossKind::cross_entropy) {
      label_width_ = out.rank() >= 2 ? out.numel() / out.back() : 1;
      classes_ = out.back();
      if (out.rank() < 2) classes_ = out.numel();
    } else {
      value_width_ = out.numel();
    }
  }
  const int total = config_.ranks * world_->size();
  const EngineOptions options = app::engine_options(config_, model_, total);
  gemm_ = app::gemm_backend(config_);
  ranks_.resize(static_cast<std::size_t>(config_.ranks));
  for (auto& r : ranks_) r = std::make_unique<Rank>();
  if (config_.ranks == 1) {
    ranks_[0]->comm = world_.get();
  } else {
    const int pool = kokkos_host_threads();
    const int per_rank = config_.threads > 0 ? config_.threads : std::max(1, pool / config_.ranks);
    STRATA_REQUIRE(config_.ranks * per_rank <= pool, config, "ranks=", config_.ranks, " x threads=",
                   per_rank, " need ", config_.ranks * per_rank, " host threads, but Strata runs ",
                   pool, " (strata.init(threads=", config_.ranks * per_rank,
                   ") before the first Trainer)");
    // The thread ranks' waits see every process's ranks on this node.
    comm::CommOptions co = comm::CommOptions::from_environment();
    co.node_threads = node_threads(*world_, config_.ranks * per_rank);
    team_ = std::make_unique<RankTeam>(config_.ranks, per_rank, co);
  }
  on_ranks([&](Rank& r) {
    r.engine = make_engine(*r.ctx, *r.comm, options, config_.batch_size);
  });
  describe_ = ranks_[0]->engine->describe();
  num_params_ = ranks_[0]->engine->num_params();
  table_ = ranks_[0]->engine->table();
}

Session::~Session() {
  // The engines go first, on their ranks (their memory and communicators).
  if (team_ && !team_->failed()) {
    try {
      on_ranks([](Rank& r) { r.engine.reset(); });
    } catch (...) {  // a destructor reports nothing; the ranks are over anyway
    }
  }
  ranks_.clear();
  team_.reset();
  world_.reset();
}

int Session::ranks() const { return config_.ranks * world_->size(); }

int Session::rank() const { return config_.ranks * world_->rank(); }

void Session::on_ranks(const std::function<void(Rank&)>& body) {
  if (!team_) {
    Rank& r = *ranks_[0];
    if (!r.ctx) r.ctx = std::make_unique<Context>(gemm_);
    body(r);
    return;
  }
  team_->run([&](Context& ctx, comm::Communicator& c) {
    Rank& r = *ranks_[static_cast<std::size_t>(c.rank())];
    r.local = c.rank();
    if (!r.ctx) r.ctx = std::make_unique<Context>(gemm_, ctx.exec);
    if (world_->size() > 1 && !r.world)  // collective: every rank of every process, once
      r.world = std::make_unique<comm::HierarchicalComm>(c, c.rank() == 0 ? world_.get() : nullptr);
    r.comm = r.world ? static_cast<comm::Communicator*>(r.world.get()) : &c;
    body(r);
  });
}

void Session::check(const HostBatch& b, const char* what) const {
  STRATA_REQUIRE(b.rows > 0, config, what, ": the batch is empty");
  STRATA_REQUIRE(b.features == features_, config, what, ": x has ", b.features,
                 " features per sample, the model takes ", features_);
  // A NaN or infinity in the inputs would poison the weights without a word.
  for (std::size_t i = 0; i < b.rows * b.features; ++i)
    STRATA_REQUIRE(std::isfinite(b.x[i]), config, what, ": x holds ", b.x[i], " at sample ",
                   i / b.features, ", feature ", i % b.features, " (inputs must be finite)");
  if (config_.loss == LossKind::cross_entropy) {
    STRATA_REQUIRE(b.labels != nullptr, config, what, ": cross-entropy needs integer labels, "
                   "got float targets");
    STRATA_REQUIRE(b.label_width == label_width_, config, what, ": ", b.label_width,
                   " labels per sample, the model's output holds ", label_width_, " position(s)");
    for (std::size_t i = 0; i < b.rows * b.label_width; ++i) {
      const std::int32_t l = b.labels[i];
      STRATA_REQUIRE(l < static_cast<std::int32_t>(classes_) && (l >= 0 || l == -100), config, what,
                     ": label ", l, " at sample ", i / b.label_width, " is outside [0, ", classes_,
                     ") (and not the ignored -100)");
    }
  } else {
    STRATA_REQUIRE(b.values != nullptr, config, what, ": MSE needs float targets, got labels");
    STRATA_REQUIRE(b.value_width == value_width_, config, what, ": targets of width ",
                   b.value_width, ", the model has ", value_width_, " outputs");
  }
}

namespace {
// Rows [first, first + count) of b as a Batch of rank r (device copies on a GPU build).
template <class RankT>
data::Batch<float> batch_rows(const HostBatch& b, std::size_t first, std::size_t count,
                              std::size_t first_row, RankT& r) {
  data::Batch<float> out;
  out.first_row = first_row;
  using HostMatrix = Kokkos::View<const float**, Kokkos::LayoutRight, Kokkos::HostSpace,
                                  Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  using HostLabels = Kokkos::View<const std::int32_t*, Kokkos::LayoutRight, Kokkos::HostSpace,
                                  Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  const HostMatrix x(b.x + first * b.features, count, b.features);
  if constexpr (host_memory) {
    out.x = ConstMatrix<float>(x.data(), count, b.features);
    if (b.labels)
      out.targets.labels = Labels(b.labels + first * b.label_width, count * b.label_width);
    else
      out.targets.values =
          ConstMatrix<float>(b.values + first * b.value_width, count, b.value_width);
  } else {
    if (r.x.extent(0) < count || r.x.extent(1) != b.features)
      r.x = MatrixBuffer<float>("python batch x", count, b.features);
    auto xd = Kokkos::subview(r.x, std::make_pair(std::size_t(0), count), Kokkos::ALL);
    Kokkos::deep_copy(xd, x);
    out.x = ConstMatrix<float>(xd.data(), count, b.features);
    if (b.labels) {
      if (r.labels.extent(0) < count * b.label_width)
        r.labels = LabelsBuffer("python batch labels", count * b.label_width);
      auto ld = Kokkos::subview(r.labels, std::make_pair(std::size_t(0), count * b.label_width));
      Kokkos::deep_copy(ld, HostLabels(b.labels + first * b.label_width, count * b.label_width));
      out.targets.labels = Labels(ld.data(), count * b.label_width);
    } else {
      if (r.values.extent(0) < count || r.values.extent(1) != b.value_width)
        r.values = MatrixBuffer<float>("python batch targets", count, b.value_width);
      auto vd = Kokkos::subview(r.values, std::make_pair(std::size_t(0), count), Kokkos::ALL);
      Kokkos::deep_copy(vd, HostMatrix(b.values + first * b.value_width, count, b.value_width));
      out.targets.values = ConstMatrix<float>(vd.data(), count, b.value_width);
    }
  }
  return out;
}
}  // namespace

double Session::step(const HostBatch& b) {
  check(b, "step");
  const std::size_t k = std::max<std::size_t>(1, config_.accumulate);
  STRATA_REQUIRE(b.rows >= k, config, "step: ", b.rows, " samples cannot make ", k,
                 " micro-batches (accumulate=", k, ")");
  STRATA_REQUIRE(config_.lr_schedule.kind == LrScheduleKind::constant || config_.steps > 0,
                 config, "step: a learning-rate schedule needs the run's length (steps=N)");
  const double lr = scheduled_lr(config_.lr_schedule, position_.step,
                                 std::max(config_.steps, position_.step + 1));
  double loss = 0;
  on_ranks([&](Rank& r) {
    Engine& e = *r.engine;
    std::vector<data::Batch<float>> micro(k);
    for (std::size_t m = 0; m < k; ++m) {
      // Micro-batch m of the global batch, then this rank's shard of it, as
      // the loader cuts them (data/loader.hpp).
      const auto [mfirst, mcount] = data::BatchLoader<float>::shard(b.rows, static_cast<int>(m),
                                                                    static_cast<int>(k));
      const auto [first, count] = data::BatchLoader<float>::shard(mcount, e.data_rank(),
                                                                  e.data_ranks());
      micro[m] = batch_rows(b, mfirst + first, count, first, r);
    }
    e.set_lr(lr);
    comm::progress::set_step(position_.step);
    const double l = e.step(micro, b.rows);
    comm::progress::step_done();
    if (r.local == 0) loss = l;  // the same on every rank
  });
  ++position_.step;
  return loss;
}

Evaluation Session::evaluate(const HostBatch& b) {
  check(b, "evaluate");
  data::Dataset d;
  d.name = "the batch given";
  d.features = b.features;
  d.x.assign(b.x, b.x + b.rows * b.features);
  if (b.labels) {
    d.classes = classes_;
    d.label_width = b.label_width;
    d.labels.assign(b.labels, b.labels + b.rows * b.label_width);
  } else {
    d.target_width = b.value_width;
    d.targets.assign(b.values, b.values + b.rows * b.value_width);
  }
  Evaluation result;
  on_ranks([&](Rank& r) {
    // Data parallel: every process's first rank (they hold the same model).
    if (r.local != 0 && !r.engine->collective()) return;
    const Evaluation e = r.engine->evaluate(d, config_.batch_size);
    if (r.local == 0) result = e;
  });
  return result;
}

TrainResult Session::fit(const FitHooks& hooks) {
  data::Split d = load_dataset_for(config_, model_);
  const std::size_t batch = config_.batch_size;
  STRATA_REQUIRE(d.train.size() >= batch, config, "fit: ", d.train.name, " has ", d.train.size(),
                 " training samples, fewer than batch_size=", batch);
  TrainResult result;
  const Position start = position_;
  on_ranks([&](Rank& r) {
    Trainer trainer(*r.engine, d, app::trainer_options(config_, batch, d.train, ""), start,
                    r.comm->rank());
    TrainerHooks h;
    if (r.local == 0) {  // each process's first rank (evaluations: the run's rank 0 only)
      h.on_step = hooks.on_step;
      h.on_evaluation = hooks.on_evaluation;
      // The steps done stay counted when a callback (or a step) throws.
      h.after_step = [this](std::size_t step) { position_.step = step; };
    }
    const TrainResult t = trainer.fit(h);
    if (r.local == 0) result = t;
  });
  position_.step = result.steps;
  return result;
}

void Session::set_length(std::size_t epochs, std::size_t steps) {
  if (steps > 0) {
    config_.steps = position_.step + steps;  // that many more
  } else if (epochs > 0) {
    config_.epochs = epochs;
    config_.steps = 0;
  }
}

std::string Session::save(const std::string& dir) {
  STRATA_REQUIRE(!dir.empty(), config, "save: no directory given");
  const CheckpointTarget target{dir, config_.keep_checkpoints, app::checkpoint_config(config_)};
  std::string file;
  on_ranks([&](Rank& r) {
    const std::string f = r.engine->save(target, position_);
    if (r.comm->rank() == 0) file = f;
  });
  return file;
}

void Session::load(const std::string& path) {
  // A checkpoint folder: the checkpoint its `latest` names.
  const std::string file = std::filesystem::is_directory(path) ? checkpoint::latest(path) : path;
  // Read once, checked against this model before any rank changes.
  const std::pair<Snapshot, Position> read =
      read_checkpoint(file, app::checkpoint_config(config_), table_);
  on_ranks([&](Rank& r) { r.engine->restore(read.first); });
  position_ = read.second;
}

Weights Session::weights() {
  Weights w;
  on_ranks([&](Rank& r) {
    Weights mine = r.engine->weights();
    if (r.local == 0) w = std::move(mine);
  });
  return w;
}

void Session::set_weights(const Weights& w) {
  on_ranks([&](Rank& r) { r.engine->set_weights(w); });
}

data::Split load_dataset_for(const app::TrainConfig& c, const ModelSpec& model) {
  return app::load_data(c, build_model<float>(model, c.seed));
}

data::Split load_dataset(const std::vector<std::string>& args) {
  std::optional<app::TrainConfig> c = app::parse_train_args(args);
  STRATA_REQUIRE(c.has_value(), config, "no data set in the options given");
  return load_dataset_for(*c, app::model_spec(*c));
}

}  // namespace strata::python
