#include "strategies/model_parallel.hpp"

#include "backends/clock.hpp"
#include "backends/error.hpp"
#include "backends/host_copy.hpp"
#include "backends/launch.hpp"
#include "backends/trace.hpp"
#include "backends/units.hpp"
#include "strategies/reproducible.hpp"
#include "strategies/sequence_shards.hpp"
#include "strategies/vocab_parallel.hpp"

#include <algorithm>
#include <chrono>
#include <limits>

namespace strata {


Balance parse_balance(const std::string& name) {
  if (name == "params") return Balance::params;
  if (name == "flops") return Balance::flops;
  STRATA_THROW(config, "unknown stage balance '", name, "' (expected params or flops)");
}

const char* to_string(Balance b) { return b == Balance::params ? "params" : "flops"; }

namespace {

std::string mib(std::size_t bytes) { return format_mib(static_cast<double>(bytes)); }
}  // namespace

std::string MemoryReport::str() const {
  return "params " + mib(params) + ", grads " + mib(grads) + ", optimizer " + mib(optimizer) +
         (master > 0 ? ", master weights " + mib(master) : std::string()) + ", activations " +
         mib(activations) + " (" + std::to_string(slots) +
         (slots == 1 ? " micro-batch), total " : " micro-batches), total ") + mib(total());
}

std::vector<std::size_t> plan_stages(const std::vector<double>& cost,
                                     const std::vector<bool>& cut_ok, int stages,
                                     const std::vector<std::size_t>& cuts) {
  const std::size_t L = cost.size();
  const auto S = static_cast<std::size_t>(stages);
  STRATA_REQUIRE(stages > 0, config, "pipeline: the number of stages must be positive");
  STRATA_REQUIRE(S <= L, config, "pipeline: ", S, " stages for a model of ", L,
                 " layers (every stage needs at least one layer)");
  // A stage may begin at layer b when the activation before it is whole.
  auto may_begin = [&](std::size_t b) { return b > 0 && b < L && cut_ok[b - 1]; };
  std::vector<std::size_t> bounds;
  if (!cuts.empty()) {
    STRATA_REQUIRE(cuts.size() + 1 == S, config, "pipeline: ", cuts.size(),
                   " cut points for ", S, " stages (give stages - 1 layer indices)");
    bounds.push_back(0);
    for (std::size_t c : cuts) {
      STRATA_REQUIRE(c > bounds.back() && c < L, config, "pipeline: cut points must increase "
                     "within 1..", L - 1, " (the model has ", L, " layers); got ", c);
      STRATA_REQUIRE(may_begin(c), config, "pipeline: a stage cannot begin at layer ", c,
                     ": the activation there is split by tensor parallelism");
      bounds.push_back(c);
    }
    bounds.push_back(L);
    return bounds;
  }
  // Balanced: minimise the largest stage cost over the allowed boundaries
  // (dynamic programming; a tiny cost per layer spreads parameter-free layers).
  std::vector<double> prefix(L + 1, 0.0);
  for (std::size_t i = 0; i < L; ++i) prefix[i + 1] = prefix[i] + cost[i] + 1e-9;
  const double inf = std::numeric_limits<double>::infinity();
  // best[s][e]: least max cost of layers [0, e) in s stages; from[s][e]: start of the last.
  std::vector<std::vector<double>> best(S + 1, std::vector<double>(L + 1, inf));
  std::vector<std::vector<std::size_t>> from(S + 1, std::vector<std::size_t>(L + 1, 0));
  best[0][0] = 0;
  for (std::size_t s = 1; s <= S; ++s)
    for (std::size_t e = 1; e <= L; ++e) {
      if (e < L && !may_begin(e)) continue;
      for (std::size_t b = s - 1; b < e; ++b) {
        if (best[s - 1][b] == inf || (b > 0 && !may_begin(b))) continue;
        const double c = std::max(best[s - 1][b], prefix[e] - prefix[b]);
        if (c < best[s][e]) {
          best[s][e] = c;
          from[s][e] = b;
        }
      }
    }
  STRATA_REQUIRE(best[S][L] < inf, config, "pipeline: the model cannot be cut into ", S,
                 " stages (tensor-parallel layer pairs cannot be split)");
  bounds.assign(S + 1, L);
  for (std::size_t s = S; s > 0; --s) bounds[s - 1] = from[s][bounds[s]];
  return bounds;
}

// What a stage is built for: its micro-batch, the micro-batches in flight,
// the run's numerics, and with ZeRO-2 its gradient units (padded to the
// data-parallel group; not under exact sums, whose twin is flat).
template <class T>
BuildOptions stage_build(const Sequential<T>& stage, const ModelParallelOptions& options,
                         std::size_t max_micro, std::size_t slots, const std::vector<bool>& tied) {
  BuildOptions b;
  b.max_batch = max_micro;
  b.slots = slots;
  b.numerics.storage = options.precision;
  b.numerics.emulated = options.emulate_storage;
  b.numerics.exact_chunk = options.reproducible_chunk;
  b.numerics.inner_chunk = options.reproducible_tp_chunk;
  if (options.zero >= 2 && options.mesh.dp > 1) {
    const auto units = zero2_grad_units(shard_units(stage, options, options.mesh.dp, tied, options.zero >= 3), tied);
    if (!b.numerics.exact()) b.grad_units = units;
    if (options.zero >= 3) b.param_units = units;
    b.pad_multiple = static_cast<std::size_t>(options.mesh.dp);
  }
  return b;
}

template <class T>
MemoryReport stage_memory(const Sequential<T>& stage, const ModelParallelOptions& options,
                          const OptimizerConfig& optimizer, std::size_t max_shard, int p,
                          const std::vector<std::size_t>& cross) {
  const std::size_t M = options.micro_batches;
  const std::vector<bool> tied = tied_pieces(stage, cross);
  const int S = options.mesh.pp;
  MemoryReport memory;
  memory.slots = schedule_slots(options.schedule, static_cast<std::size_t>(S),
                                static_cast<std::size_t>(p), M);
  const std::size_t max_micro = (max_shard + M - 1) / M;
  const std::size_t dp = static_cast<std::size_t>(options.mesh.dp);
  const BuildOptions build = stage_build(stage, options, max_micro, memory.slots, tied);
  const std::size_t n = stage.num_params();
  memory.params = memory.grads = n * sizeof(T);
  std::size_t updated = n;
  if (options.zero >= 1 && dp > 1) {
    // The shard (strategies/shard_map.hpp): its working values and padded
    // gathers beside the parameters, its gradients and the copies they
    // travel in beside the gradients.
    // ZeRO-2: the unit buffers instead of the whole gradients.
    // ZeRO-3: the unit buffers instead of the whole parameters.
    const ShardMap map = shard_units(stage, options, options.mesh.dp, tied, !build.param_units.empty());
    updated = map.shard_size();
    if (!build.param_units.empty()) memory.params = unit_grad_bytes(map, build.param_units, sizeof(T)) + updated * sizeof(T);
    else memory.params += (updated + map.uneven_padded()) * sizeof(T);
    if (!build.grad_units.empty()) memory.grads = unit_grad_bytes(map, build.grad_units, sizeof(T));
    memory.grads += reduce_scatter_bytes(map, options, build.numerics.exact(), build.grad_units,
                                         M > 1, sizeof(T));
  } else if (options.compression != GradCompression::none && dp > 1) {
    memory.grads += n * 2;  // 16-bit buckets
  }
  memory.optimizer = state_elements(optimizer, updated) * sizeof(T);
  memory.master = options.precision != Precision::fp32 ? updated * sizeof(T) : 0;
  memory.activations = stage.activation_bytes(build);
  std::size_t scratch = 0;  // sequence parallelism's, shared by the stage's layers
  for (std::size_t i = 0; i < stage.num_layers(); ++i)
    scratch = std::max(scratch, sequence_scratch_bytes(stage.layer(i), max_micro, build.numerics.exact()));
  memory.activations += scratch;
  if (p > 0)  // received inputs per slot and the input gradient sent back
    memory.activations += (memory.slots + 1) * max_micro * stage.in_features() * sizeof(T);
  if (p + 1 < S) memory.activations += max_micro * stage.out_features() * sizeof(T);
  return memory;
}

template <class T>
ModelParallel<T>::ModelParallel(Context& ctx, comm::Communicator& world, const ModelSpec& model,
                                Init init, std::uint64_t seed, LossKind loss,
                                const OptimizerConfig& optimizer, std::size_t max_shard,
                                const ModelParallelOptions& options)
    : ctx_(ctx), options_(options) {
  // Everything that can be checked without the others first: every rank
  // throws the same error before any communication.
  validate_mesh(options.mesh, world.size());
  validate(optimizer);
  validate<T>(options, "model parallel");
  validate(static_cast<const GradSyncOptions&>(options), options.loss_scaling);
  STRATA_REQUIRE(options.micro_batches > 0, config, "--micro-batches must be positive");
  STRATA_REQUIRE(options.zero >= 0 && options.zero <= 3, config, "--zero ", options.zero,
                 ": ZeRO stages 0 to 3 are available (1: optimizer state and gradient sums "
                 "sharded; 2: and no whole gradient buffer; 3: nor parameter buffer)");
  STRATA_REQUIRE(max_shard > 0, config, "model parallel: batch size must be positive");
  STRATA_REQUIRE(!options.sequence_parallel || options.mesh.tp > 1, config,
                 "--sequence-parallel shards the sequence over the tensor-parallel ranks: it "
                 "needs --tp 2 or more (this layout has --tp ", options.mesh.tp, ")");
  STRATA_REQUIRE(options.reproducible_chunk == 0 || options.mesh.tp == 1 ||
                     options.reproducible_tp_chunk > 0,
                 config, "--reproducible with --tp ", options.mesh.tp, " needs --tp-chunk S: the "
                 "sums tensor parallelism splits (a layer's input or output features) go in chunks "
                 "of S features, added exactly; give the same --tp-chunk to every run that must "
                 "agree, --tp 1 included (e.g. 32)");
  const std::size_t M = options.micro_batches;
  const MeshShape shape = options.mesh;
  mesh_ = std::make_unique<Mesh>(world, shape);
  const int p = mesh_->pp_rank(), S = shape.pp;

  TensorParallelLayers<T> all = make_tensor_parallel<T>(
      build_layers<T>(with_recompute(model, options.recompute), seed), mesh_->tp(),
      loss == LossKind::cross_entropy, options.sequence_parallel);
  resolve_ties(all.layers, all.names);  // single-rank sizes (full_sizes) of tied layers
  const std::vector<double>& flops = all.flops;
  std::vector<double> cost(all.layers.size());
  for (std::size_t i = 0; i < cost.size(); ++i)
    cost[i] = options.balance == Balance::flops
                  ? flops[i]
                  : static_cast<double>(all.layers[i]->num_params());
  bounds_ = plan_stages(cost, all.cut_ok, S, options.cuts);
  std::vector<std::size_t> full_sizes;  // single-rank parameter count of every layer
  for (auto& l : all.layers) {
    const TensorShard<T>* sharded = tensor_shard(*l);
    full_sizes.push_back(sharded ? sharded->full_num_params() : l->num_params());
  }
  // Ties whose two layers fall on different stages (before the layers move into the stage).
  std::vector<CrossTie> cross_ties = find_cross_ties(all, bounds_, full_sizes, mesh_->tp_rank());

  // This rank's stage: the input shape at its first layer (whole: cuts only
  // fall where the activation is whole).
  Shape input = all.input;
  for (std::size_t i = 0; i < bounds_[p]; ++i) input = all.layers[i]->output_shape(input);
  stage_ = std::make_unique<Sequential<T>>(Sequential<T>::stage(input, bounds_[p]));
  for (std::size_t i = bounds_[p]; i < bounds_[p + 1]; ++i)
    stage_->add(std::move(all.layers[i]), all.names[i]);

  // Tied weights across stages (their gradients wait for the tie sum).
  ties_ = std::make_unique<StageTies<T>>(ctx, *mesh_, *stage_, bounds_, std::move(cross_ties));
  // Memory: known before allocation.
  memory_ = stage_memory(*stage_, options, optimizer, max_shard, p, ties_->layers());
  const std::vector<bool> tied = tied_pieces(*stage_, ties_->layers());
  slots_ = memory_.slots;
  max_micro_ = (max_shard + M - 1) / M;
  if (options.memory_budget > 0) {
    const auto mine = static_cast<std::int64_t>(memory_.total());
    const auto worst = world.allreduce_value(mine, comm::ReduceOp::max);
    STRATA_REQUIRE(static_cast<std::size_t>(worst) <= options.memory_budget, config,
                   "memory budget of ", mib(options.memory_budget), " per rank exceeded: ",
                   mine == worst ? "this rank" : "another rank", " needs ",
                   mib(static_cast<std::size_t>(worst)), " (this rank, stage ", p, " of ", S,
                   ": ", memory_.str(), "); split the model with --pp or --tp, shard the "
                   "optimizer with --zero 1, or use fewer --micro-batches in flight or a "
                   "smaller batch");
  }

  stage_->build(stage_build(*stage_, options, max_micro_, slots_, tied));
  stage_->init(init, seed);
  if (options.reproducible_chunk > 0) enable_reproducible(ctx);
  ties_->share_weights();
  sharded_ = std::make_unique<ShardedOptimizer<T>>(ctx, *mesh_, *stage_, options, options,
                                                    options.zero, optimizer, *ties_, M,
                                                    [this, init, seed](std::size_t a, std::size_t b) {
                                                      return stage_->initial_values(a, b, init, seed);
                                                    },
                                                    tied);
  layout_ = std::make_unique<StageLayout<T>>(*mesh_, *stage_, *ties_, bounds_, std::move(full_sizes),
                                             sharded_->shards());
  if (all.classes > 0)  // the logits split over the tensor group by class
    loss_ = std::make_unique<VocabParallelCrossEntropy<T>>(mesh_->tp(), all.first_class, all.classes);
  else
    loss_ = make_loss<T>(loss);
  if (p > 0) {
    for (std::size_t s = 0; s < slots_; ++s)
      inputs_.emplace_back("strata::pipeline::input", max_micro_ * stage_->in_features());
    dx_ = VectorBuffer<T>("strata::pipeline::dx", max_micro_ * stage_->in_features());
  }
  if (p + 1 < S) dy_ = VectorBuffer<T>("strata::pipeline::dy", max_micro_ * stage_->out_features());
}

template <class T>
ModelParallel<T>::~ModelParallel() = default;

template <class T>
Matrix<T> ModelParallel<T>::rows(const VectorBuffer<T>& buf, std::size_t count,
                                 std::size_t width) const {
  return reshape(Vector<T>(buf), 0, count, width);
}

namespace {
// Rows [first, first + count) of a batch.
template <class T>
ConstMatrix<T> row_block(ConstMatrix<T> x, std::size_t first, std::size_t count) {
  return ConstMatrix<T>(x.data() + first * x.extent(1), count, x.extent(1));
}
// rows: of the whole batch (labels may be several per row: per position).
template <class T>
Targets<T> target_block(const Targets<T>& t, std::size_t first, std::size_t count, std::size_t rows) {
  Targets<T> out;
  if (t.labels.data() != nullptr) {
    const std::size_t per = rows > 0 ? t.labels.extent(0) / rows : 1;
    STRATA_REQUIRE(rows == 0 || t.labels.extent(0) == rows * per, config, "model parallel: ",
                   t.labels.extent(0), " labels for a shard of ", rows, " rows");
    out.labels = Labels(t.labels.data() + first * per, count * per);
  }
  if (t.values.data() != nullptr) out.values = row_block(t.values, first, count);
  return out;
}
// A writable view of a layer output (the communicator's View wrappers stage
// device memory through host copies they write back into).
template <class T>
Matrix<T> writable(ConstMatrix<T> m) {
  return Matrix<T>(const_cast<T*>(m.data()), m.extent(0), m.extent(1));
}
}  // namespace

template <class T>
void ModelParallel<T>::forward_micro(const data::Batch<T>& shard, std::size_t m,
                                     std::size_t first, std::size_t count, T scale,
                                     ExactSum& loss_sum) {
  const std::size_t slot = m % slots_;
  const int p = mesh_->pp_rank();
  const int tag = static_cast<int>(2 * m);
  STRATA_SPAN("compute", "micro-batch " + std::to_string(m) + " forward");
  ConstMatrix<T> in;
  if (first_stage()) {
    in = row_block(shard.x, first, count);
  } else {
    Matrix<T> buf = rows(inputs_[slot], count, stage_->in_features());
    const auto t0 = Clock::now();
    mesh_->pp().recv(buf, p - 1, tag);
    timing_.pipeline_wait_s += seconds_since(t0);
    in = buf;
  }
  stage_->set_row_offset(shard.first_row + first);
  ConstMatrix<T> out = stage_->forward(ctx_, in, slot, m == 0);
  peak_in_flight_ = std::max(peak_in_flight_, ++in_flight_);
  if (last_stage()) {
    STRATA_SPAN("compute", "loss " + loss_->name());
    loss_sum += loss_->forward_backward(ctx_, out, target_block(shard.targets, first, count, shard.size()),
                                        stage_->output_grad(slot), scale);
  } else {
    ctx_.exec.fence();
    mesh_->pp().send(writable(out), p + 1, tag);
  }
}

template <class T>
void ModelParallel<T>::backward_micro(std::size_t m, std::size_t count, bool last) {
  const std::size_t slot = m % slots_;
  const int p = mesh_->pp_rank();
  const int tag = static_cast<int>(2 * m + 1);
  STRATA_SPAN("compute", "micro-batch " + std::to_string(m) + " backward");
  ConstMatrix<T> dy;
  if (last_stage()) {
    stage_->round_output_grad(ctx_, slot);  // as single-rank training rounds the loss gradient
    dy = stage_->output_grad(slot);
  } else {
    Matrix<T> buf = rows(dy_, count, stage_->out_features());
    const auto t0 = Clock::now();
    mesh_->pp().recv(buf, p + 1, tag);
    timing_.pipeline_wait_s += seconds_since(t0);
    dy = buf;
  }
  Matrix<T> dx;
  if (!first_stage()) dx = rows(dx_, count, stage_->in_features());
  // Gradient buckets start as backward completes them.
  sharded_->backward_begins(last);
  stage_->backward(ctx_, dy, dx, slot, [&](std::size_t k) { sharded_->layer_done(k); });
  if (!first_stage()) {
    ctx_.exec.fence();
    mesh_->pp().send(dx, p - 1, tag);
  }
  --in_flight_;
}

template <class T>
double ModelParallel<T>::step(const data::Batch<T>& shard, std::size_t global_samples) {
  STRATA_REQUIRE(global_samples > 0, config, "model parallel: global batch of 0 samples");
  const std::size_t B = shard.size();
  STRATA_REQUIRE(B <= max_micro_ * options_.micro_batches, config, "model parallel: shard of ", B,
                 " rows exceeds the ", max_micro_ * options_.micro_batches, " it was built for");
  // ZeRO-2 and 3 communicate in every micro-batch's passes: every rank runs
  // them all, a micro-batch without rows (a short last batch) as an idle
  // pass that takes part in the collectives only.
  const bool every_pass = sharded_->communicates_per_pass();
  const std::size_t M = every_pass ? options_.micro_batches : std::min(options_.micro_batches, B);
  info_ = StepInfo{};
  // With loss scaling the loss gradient is multiplied by the scale.
  const T scale = static_cast<T>(sharded_->loss_scale()) / static_cast<T>(global_samples);
  const auto t0 = Clock::now();
  timing_ = Timing();
  stage_->zero_grad(ctx_);
  stage_->set_training(true);
  sharded_->begin(info_);
  in_flight_ = peak_in_flight_ = 0;
  ExactSum loss_sum;
  auto micro = [&](std::size_t m) { return data::BatchLoader<T>::shard(B, static_cast<int>(m), static_cast<int>(M)); };
  auto F = [&](std::size_t m) {
    const auto [first, count] = micro(m);
    if (count == 0) sharded_->idle_forward();
    else forward_micro(shard, m, first, count, scale, loss_sum);
  };
  auto Bk = [&](std::size_t m) {
    const std::size_t count = micro(m).second;
    if (count == 0) sharded_->idle_backward(m + 1 == M);
    else backward_micro(m, count, m + 1 == M);
  };
  for (const PipelineAction& a :
       schedule_actions(options_.schedule, static_cast<std::size_t>(mesh_->shape().pp),
                        static_cast<std::size_t>(mesh_->pp_rank()), M))
    a.kind == PipelineAction::forward ? F(a.micro) : Bk(a.micro);
  mesh_->pp().flush();  // a stage's last send may be held back (NCCL)
  ties_->sum_gradients();
  const auto t1 = Clock::now();
  {
    STRATA_SPAN("compute", "gradient sync and optimizer step");
    sharded_->step(info_);
  }
  timing_.sync_s = seconds_since(t1);
  // The loss: summed on the last stage of every pipeline (tensor rank 0).
  const bool counts = last_stage() && mesh_->tp_rank() == 0;
  const double total = mesh_->world().allreduce_exact(counts ? loss_sum : ExactSum()).value();
  ctx_.exec.fence();
  timing_.step_s = seconds_since(t0);
  return total / static_cast<double>(global_samples);
}


template <class T>
std::vector<T> ModelParallel<T>::full_params() {
  if (options_.precision == Precision::fp32 && !sharded_->shards())
    return layout_->gather(copy_to_host<T>(stage_->params()));
  // The values the optimizer updates (sharded: the shards gathered).
  return layout_->gather(layout_->stage_state(sharded_->precision().master()));
}

template <class T>
void ModelParallel<T>::set_full_params(const std::vector<T>& full) {
  sharded_->set_params(layout_->scatter(full));
}

template <class T>
std::vector<T> ModelParallel<T>::full_optimizer_state(int k) {
  Vector<T> state = k == 0 ? sharded_->optimizer().state0() : sharded_->optimizer().state1();
  // Whether the optimizer keeps this buffer is the same on every rank.
  if (state.extent(0) == 0) return {};
  return layout_->gather(layout_->stage_state(state));
}

template <class T>
void ModelParallel<T>::set_full_optimizer_state(int k, const std::vector<T>& full) {
  Vector<T> state = k == 0 ? sharded_->optimizer().state0() : sharded_->optimizer().state1();
  STRATA_REQUIRE(state.extent(0) > 0 || full.empty(), config,
                 "model parallel: optimizer state ", k, " given to an optimizer that keeps none");
  if (state.extent(0) == 0) return;
  layout_->set_stage_state(state, layout_->scatter(full));
}

template <class T>
std::string ModelParallel<T>::layout() const {
  std::string s = "mesh " + mesh_->shape().str() +
                  (options_.zero ? ", ZeRO-" + std::to_string(options_.zero) : std::string()) +
                  ", stages begin at layers ";
  for (std::size_t i = 0; i + 1 < bounds_.size(); ++i) s += (i ? "," : "") + std::to_string(bounds_[i]);
  return s;
}

template <class T>
typename ModelParallel<T>::CheckpointShard ModelParallel<T>::checkpoint_shard() {
  // This data-parallel rank's part of the stage's values: its pieces of the
  // shard map (sharded: where its optimizer state and master weights are;
  // else one unit of the whole stage, cut evenly over dp).
  const ShardMap* shards = sharded_->shards();
  const ShardMap whole({0, stage_->num_params()}, 0, mesh_->shape().dp);
  const ShardMap& map = shards ? *shards : whole;
  // Optimizer state and master weights: in shard order when sharded, else
  // in the stage's flat order.
  auto values = [&](Vector<T> v) { return copy_to_host<T>(v); };
  // The values the optimizer updates: with mixed precision the fp32 master
  // weights, not the working copy rounded to 16 bits; sharded, the shard.
  const std::vector<T> master = values(sharded_->precision().master());
  std::vector<T> state[2];
  for (int k = 0; k < 2; ++k) {
    Vector<T> st = k == 0 ? sharded_->optimizer().state0() : sharded_->optimizer().state1();
    if (st.extent(0) > 0) state[k] = values(st);
  }
  CheckpointShard out;
  for (const ShardPiece& piece : map.pieces(mesh_->dp_rank())) {
    // Where values of the flat buffer are in the state (shard or flat order).
    const std::size_t shift = shards ? piece.shard : piece.flat;
    for (const auto& [k, at] : layout_->written(piece.flat, piece.flat + piece.count)) {
      if (out.ranges.empty() || out.ranges.back().first + out.ranges.back().second != at)
        out.ranges.emplace_back(at, 0);
      ++out.ranges.back().second;
      const std::size_t i = k - piece.flat + shift;
      out.params.push_back(master[i]);
      for (int s = 0; s < 2; ++s)
        if (!state[s].empty()) (s == 0 ? out.opt0 : out.opt1).push_back(state[s][i]);
    }
  }
  return out;
}

template <class T>
Evaluation ModelParallel<T>::evaluate(const data::Dataset& d) {
  stage_->set_training(false);
  data::BatchLoader<T> loader(d, max_micro_, false, 0);
  ExactSum sum;
  std::size_t correct = 0, samples = 0;
  const int p = mesh_->pp_rank();
  data::Batch<T> b;
  while (loader.next(b)) {
    const std::size_t count = b.size();
    ConstMatrix<T> in = b.x;
    if (!first_stage()) {
      Matrix<T> buf = rows(inputs_[0], count, stage_->in_features());
      mesh_->pp().recv(buf, p - 1, 0);
      in = buf;
    }
    ConstMatrix<T> out = stage_->forward(ctx_, in, 0, false);
    if (last_stage()) {
      sum += loss_->forward_backward(ctx_, out, b.targets, Matrix<T>(), T(1));
      if (d.is_classification()) correct += loss_->count_correct(ctx_, out, b.targets.labels);
    } else {
      ctx_.exec.fence();
      mesh_->pp().send(writable(out), p + 1, 0);
    }
    samples += count;
  }
  mesh_->pp().flush();
  stage_->set_training(true);
  // Every pipeline evaluated the same data: take data-parallel rank 0's.
  const bool counts = last_stage() && mesh_->tp_rank() == 0 && mesh_->dp_rank() == 0;
  Evaluation e;
  e.samples = samples;
  e.loss = mesh_->world().allreduce_exact(counts ? sum : ExactSum()).value() / static_cast<double>(samples);
  e.accuracy = static_cast<double>(mesh_->world().allreduce_value(
                   static_cast<std::int64_t>(counts ? correct : 0))) /
               static_cast<double>(samples * d.label_width);
  return e;
}

template MemoryReport stage_memory<float>(const Sequential<float>&, const ModelParallelOptions&,
                                          const OptimizerConfig&, std::size_t, int,
                                          const std::vector<std::size_t>&);
template MemoryReport stage_memory<double>(const Sequential<double>&, const ModelParallelOptions&,
                                           const OptimizerConfig&, std::size_t, int,
                                           const std::vector<std::size_t>&);
template class ModelParallel<float>;
template class ModelParallel<double>;

}  // namespace strata
