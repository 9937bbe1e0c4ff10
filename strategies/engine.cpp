#include "strategies/engine.hpp"

#include "backends/error.hpp"
#include "backends/host_copy.hpp"
#include "layers/registry.hpp"

#include <cstdio>

namespace strata {

namespace {

using T = float;

std::string describe_mixed_precision(const MixedPrecisionOptions& o) {
  std::string s;
  if (o.precision != Precision::fp32)
    s += std::string(", ") + to_string(o.precision) +
         " activations (16-bit storage), working weights rounded to " + to_string(o.precision) +
         ", fp32 master weights";
  if (o.loss_scaling) s += ", dynamic loss scaling";
  if (o.clip_grad_norm > 0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g", o.clip_grad_norm);
    s += std::string(", gradients clipped to norm ") + buf;
  }
  return s;
}

std::string describe_grad_sync(const GradSyncOptions& o) {
  return o.compression == GradCompression::none
             ? std::string()
             : std::string(", gradients communicated in ") + to_string(o.compression);
}

// The single-rank model's table (names in single-rank layout whatever the engine).
ModelTable model_table(const Sequential<T>& model, const ModelSpec& spec) {
  return {model.parameters(), model.buffers(), spec.mlp, model.tied_weights()};
}

class DataParallelEngine final : public Engine {
 public:
  DataParallelEngine(Context& ctx, comm::Communicator& comm, const EngineOptions& o,
                     std::size_t batch)
      : ctx_(ctx), comm_(comm), model_(build_model<T>(with_recompute(o.model, o.recompute), o.seed)),
        loss_(make_loss<T>(o.loss)) {
    table_ = model_table(model_, o.model);
    if (o.reproducible_chunk > 0) validate_reproducible(o.reproducible_chunk, batch, comm.size());
    BuildOptions b;
    // The largest shard of a global batch (the first ranks take the remainder).
    b.max_batch = std::max<std::size_t>(1, data::BatchLoader<T>::shard(batch, 0, comm.size()).second);
    b.numerics.storage = o.data.precision;
    b.numerics.emulated = o.data.emulate_storage;
    b.numerics.exact_chunk = o.reproducible_chunk;
    b.numerics.inner_chunk = o.reproducible_tp_chunk;
    model_.build(b);
    model_.init(o.init, o.seed);
    if (o.reproducible_chunk > 0) enable_reproducible(ctx);
    optimizer_ = std::make_unique<Optimizer<T>>(o.optimizer, model_.num_params());
    if (o.optimizer.no_decay_bias_norm)
      optimizer_->set_no_decay(no_decay_ranges(model_.parameters(), 0, model_.num_params()));
    strategy_ = std::make_unique<DataParallel<T>>(ctx, comm, model_, *loss_, *optimizer_, o.data);
  }
  std::string describe() const override {
    std::string s = comm_.size() == 1 ? "local (one rank)"
                                      : "data parallel over " + std::to_string(comm_.size()) + " ranks";
    s += describe_reproducible(model_.numerics().exact_chunk, model_.numerics().inner_chunk);
    const auto& o = strategy_->options();
    if (comm_.size() > 1 && strategy_->synced_layers() > 0)
      s += ", SyncBatchNorm (" + std::to_string(strategy_->synced_layers()) + " layers)";
    return s + describe_mixed_precision(o) + describe_grad_sync(o);
  }
  std::size_t num_params() const override { return model_.num_params(); }
  int data_rank() const override { return comm_.rank(); }
  int data_ranks() const override { return comm_.size(); }
  double step(const std::vector<data::Batch<T>>& micro, std::size_t global) override {
    return strategy_->step(micro, global);
  }
  void set_lr(double lr) override { optimizer_->set_lr(lr); }
  std::string first_nonfinite() override { return model_.first_nonfinite(ctx_); }
  const StepInfo& last_info() const override { return strategy_->last_info(); }
  bool collective() const override { return false; }
  Evaluation evaluate(const data::Dataset& d, std::size_t batch) override {
    return strata::evaluate(ctx_, model_, *loss_, d, batch);
  }
  // Every rank holds the whole model: rank 0 writes one file.
  std::string save(const CheckpointTarget& target, const Position& p) override {
    if (comm_.rank() != 0) return std::string();
    Snapshot snap;
    snap.optimizer_steps = optimizer_->steps();
    snap.buffers = model_.read_buffers();
    if (const DynamicLossScaler* scaler = strategy_->scaler()) snap.scaler = scaler->state();
    checkpoint::State s = checkpoint_state(target.config, p, snap, table_);
    s.params = copy_to_host<float>(strategy_->master_params());  // fp32 master weights
    s.opt0 = copy_to_host<float>(optimizer_->state0());
    s.opt1 = copy_to_host<float>(optimizer_->state1());
    return checkpoint::save(target.dir, p.step, s, target.keep);
  }
  Weights weights() override {
    return {copy_to_host<float>(strategy_->master_params()), model_.read_buffers()};
  }
  void set_weights(const Weights& w) override {
    copy_from_host<float>(w.params, strategy_->master_params());
    strategy_->sync_working_params();
    auto buffers = model_.read_buffers();
    for (const auto& [name, values] : w.buffers) buffers[name] = values;
    model_.write_buffers(buffers);
  }
  void restore(const Snapshot& s) override {
    copy_from_host<float>(s.params, strategy_->master_params());
    strategy_->sync_working_params();
    copy_from_host<float>(s.opt0, optimizer_->state0());
    copy_from_host<float>(s.opt1, optimizer_->state1());
    optimizer_->set_steps(s.optimizer_steps);
    model_.write_buffers(s.buffers);
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

class ModelParallelEngine final : public Engine {
 public:
  ModelParallelEngine(Context& ctx, comm::Communicator& world, const EngineOptions& o,
                      std::size_t batch)
      : ctx_(ctx), world_(world), options_(o.mesh) {
    options_.recompute = options_.recompute || o.recompute;
    STRATA_REQUIRE(!o.model.sync_batchnorm, config, o.model.source, ": SyncBatchNorm "
                   "(sync_batchnorm, --sync-bn) works with data parallelism (--strategy dp); "
                   "with --pp, --tp or --zero each rank's BatchNorm normalises its own "
                   "micro-batch (drop --sync-bn or sync_batchnorm)");
    // The single-rank model's names (nothing allocated: the model is not built).
    table_ = model_table(build_model<T>(o.model, o.seed), o.model);
    validate_mesh(options_.mesh, world.size());
    if (o.reproducible_chunk > 0) {
      const std::size_t shard = data::BatchLoader<T>::shard(batch, 0, options_.mesh.dp).second;
      validate_reproducible(o.reproducible_chunk, batch, options_.mesh.dp,
                            std::min(options_.micro_batches, shard));
      options_.reproducible_chunk = o.reproducible_chunk;
      options_.reproducible_tp_chunk = o.reproducible_tp_chunk;
    }
    const std::size_t shard =
        std::max<std::size_t>(1, data::BatchLoader<T>::shard(batch, 0, options_.mesh.dp).second);
    mp_ = std::make_unique<ModelParallel<T>>(ctx, world, o.model, o.init, o.seed, o.loss,
                                             o.optimizer, shard, options_);
  }
  std::string describe() const override {
    std::string s = "mesh " + options_.mesh.str();
    if (options_.mesh.pp > 1)
      s += ", " + std::string(to_string(options_.schedule)) + " with " +
           std::to_string(options_.micro_batches) + " micro-batches, stage " +
           std::to_string(mp_->mesh().pp_rank()) + " holds layers " +
           std::to_string(mp_->stage_bounds()[mp_->mesh().pp_rank()]) + "-" +
           std::to_string(mp_->stage_bounds()[mp_->mesh().pp_rank() + 1] - 1);
    if (options_.zero) s += ", ZeRO-" + std::to_string(options_.zero);
    s += describe_reproducible(options_.reproducible_chunk, options_.reproducible_tp_chunk);
    s += describe_mixed_precision(options_);
    if (options_.mesh.dp > 1) s += describe_grad_sync(options_);
    return s + "; memory per rank: " + mp_->memory().str();
  }
  std::size_t num_params() const override { return mp_->full_num_params(); }
  int data_rank() const override { return mp_->mesh().dp_rank(); }
  int data_ranks() const override { return mp_->mesh().shape().dp; }
  double step(const std::vector<data::Batch<T>>& micro, std::size_t global) override {
    return mp_->step(micro.at(0), global);
  }
  void set_lr(double lr) override { mp_->optimizer().set_lr(lr); }
  std::string first_nonfinite() override {
    return "stage " + std::to_string(mp_->mesh().pp_rank()) + ": " +
           mp_->stage().first_nonfinite(ctx_);
  }
  const StepInfo& last_info() const override { return mp_->last_info(); }
  bool collective() const override { return true; }
  Evaluation evaluate(const data::Dataset& d, std::size_t) override { return mp_->evaluate(d); }
  // Sharded: every rank writes the values it alone holds, rank 0 the
  // manifest; nothing is gathered but the (small) buffers.
  std::string save(const CheckpointTarget& target, const Position& p) override {
    Snapshot snap;
    snap.optimizer_steps = mp_->optimizer().steps();
    snap.buffers = mp_->full_buffers(table_.buffers);
    // Every rank takes the same skip decisions: any rank's scaler will do.
    if (const DynamicLossScaler* scaler = mp_->scaler()) snap.scaler = scaler->state();
    auto part = mp_->checkpoint_shard();
    checkpoint::Shard mine;
    for (const auto& [offset, length] : part.ranges) mine.ranges.push_back({offset, length});
    mine.params = std::move(part.params);
    mine.opt0 = std::move(part.opt0);
    mine.opt1 = std::move(part.opt1);
    const std::string file = checkpoint::save_sharded(
        world_, target.dir, p.step, checkpoint_state(target.config, p, snap, table_),
        mp_->layout(), mp_->full_num_params(), mine, target.keep);
    return world_.rank() == 0 ? file : std::string();
  }
  Weights weights() override {
    return {mp_->full_params(), mp_->full_buffers(table_.buffers)};
  }
  void set_weights(const Weights& w) override {
    mp_->set_full_params(w.params);
    auto buffers = mp_->full_buffers(table_.buffers);
    for (const auto& [name, values] : w.buffers) buffers[name] = values;
    mp_->set_full_buffers(buffers);
  }
  void restore(const Snapshot& s) override {
    mp_->set_full_params(s.params);
    mp_->set_full_optimizer_state(0, s.opt0);
    mp_->set_full_optimizer_state(1, s.opt1);
    mp_->optimizer().set_steps(s.optimizer_steps);
    mp_->set_full_buffers(s.buffers);
    if (DynamicLossScaler* scaler = mp_->scaler(); scaler && s.scaler) scaler->set_state(*s.scaler);
  }

 private:
  Context& ctx_;
  comm::Communicator& world_;
  ModelParallelOptions options_;
  std::unique_ptr<ModelParallel<T>> mp_;
};

}  // namespace

ImportReport load_weights(Engine& e, const std::string& path, bool strict) {
  const safetensors::File file = safetensors::read(path);
  Weights w = e.weights();
  const ImportReport r = import_weights(file, path, e.table(), w, strict);
  e.set_weights(w);
  return r;
}

void save_weights(Engine& e, const std::string& path, safetensors::DType dtype,
                  const std::map<std::string, std::string>& metadata, bool writes) {
  const Weights w = e.weights();  // collective
  if (!writes) return;
  safetensors::File file = export_weights(e.table(), w, dtype);
  for (const auto& [k, v] : metadata) file.metadata[k] = v;
  safetensors::write(path, file);
}

std::unique_ptr<Engine> make_engine(Context& ctx, comm::Communicator& comm,
                                    const EngineOptions& o, std::size_t batch) {
  if (o.model_parallel) return std::make_unique<ModelParallelEngine>(ctx, comm, o, batch);
  return std::make_unique<DataParallelEngine>(ctx, comm, o, batch);
}

}  // namespace strata
