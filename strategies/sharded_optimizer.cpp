#include "strategies/sharded_optimizer.hpp"

#include "backends/host_copy.hpp"
#include "strategies/tensor_parallel.hpp"

#include <algorithm>
#include <cmath>
#include <optional>

namespace strata {

template <class T>
ShardedOptimizer<T>::ShardedOptimizer(Context& ctx, Mesh& mesh, Sequential<T>& stage,
                                      const MixedPrecisionOptions& precision,
                                      const GradSyncOptions& sync, int zero,
                                      const OptimizerConfig& config, const StageTies<T>& ties,
                                      std::size_t micro_batches, const InitialValues& initial,
                                      const std::vector<bool>& tied)
    : ctx_(ctx), mesh_(mesh), stage_(stage), zero_(zero), holds_(ties.holds_gradients()),
      held_(ties.held()) {
  Vector<T> updated;  // the working values this rank's optimizer updates
  std::vector<std::pair<std::size_t, std::size_t>> no_decay;
  if (zero >= 1 && mesh_.dp().size() > 1) {
    rs_ = std::make_unique<GradientReduceScatter<T>>(ctx, mesh_.dp(), stage_, sync,
                                                     precision.loss_scaling, micro_batches > 1, tied);
    const ShardMap& map = rs_->map();
    const int r = mesh_.dp_rank();
    shard_params_ = VectorBuffer<T>("strata::zero::shard_params", map.shard_size());
    if (stage_.param_units().empty()) {  // this rank's pieces, copied in place (no whole copy)
      for (const ShardPiece& p : map.pieces(r))
        Kokkos::deep_copy(Kokkos::subview(Vector<T>(shard_params_), Kokkos::make_pair(p.shard, p.shard + p.count)),
                          stage_.params(p.flat, p.flat + p.count));
    } else {  // ZeRO-3: unit by unit, from the stage where it holds the unit, else from scratch
      std::vector<T> shard(map.shard_size(), T(0));
      const auto& units = map.units();
      std::vector<T> layer;  // the initial values of top-level layer `at` (a block's units share them)
      std::size_t at = SIZE_MAX;
      for (std::size_t u = 0; u < units.size(); ++u) {
        const ShardUnit& unit = units[u];
        // This rank's slice: the unit's values [lo, hi).
        const std::size_t lo = std::min(unit.size(), unit.slice * static_cast<std::size_t>(r));
        const std::size_t hi = std::min(unit.size(), lo + unit.slice);
        const auto into = shard.begin() + static_cast<std::ptrdiff_t>(unit.shard);
        if (stage_.holds_unit_params(u)) {
          const std::vector<T> values = copy_to_host<T>(stage_.unit_params(u));
          std::copy(values.begin() + static_cast<std::ptrdiff_t>(lo),
                    values.begin() + static_cast<std::ptrdiff_t>(hi), into);
          continue;
        }
        // Layer by layer (one layer's values on the host at a time).
        for (std::size_t f = unit.first + lo; f < unit.first + hi;) {
          const std::size_t l = stage_.layer_of(f);
          if (l != at) {
            layer = std::vector<T>();  // freed before the next is made
            layer = initial(l, l + 1);
            at = l;
          }
          const std::size_t base = stage_.param_offset(l);
          const std::size_t end = std::min(unit.first + hi, stage_.param_offset(l + 1));
          std::copy(layer.begin() + static_cast<std::ptrdiff_t>(f - base),
                    layer.begin() + static_cast<std::ptrdiff_t>(end - base),
                    into + static_cast<std::ptrdiff_t>(f - unit.first - lo));
          f = end;
        }
      }
      copy_from_host<T>(shard, shard_params_);
      gather_ = std::make_unique<ParameterGather<T>>(ctx, mesh_.dp(), stage_, map, shard_params_);
    }
    // Each piece's unit gathered before it runs (ZeRO-3), each unit
    // reduce-scattered once backward has completed it.
    PieceHooks hooks;
    if (gather_)
      hooks.before = [g = gather_.get()](std::size_t p, Pass pass) { g->before_piece(p, pass); };
    hooks.done = [rs = rs_.get()](std::size_t p) { rs->piece_done(p); };
    stage_.set_piece_hooks(std::move(hooks));
    updated = shard_params_;
    grads_ = rs_->shard_grads();
    if (config.no_decay_bias_norm) {
      const std::vector<ParamInfo> params = stage_.parameters();
      for (const ShardPiece& p : map.pieces(r))
        for (const auto& [lo, hi] : no_decay_ranges(params, p.flat, p.count))
          no_decay.push_back({p.shard + lo, p.shard + hi});
    }
    // Units the group does not divide are gathered into a padded copy.
    const auto ranks = static_cast<std::size_t>(mesh_.dp().size());
    std::size_t padded = 0;
    for (const ShardUnit& u : map.units()) {
      gather_at_.push_back(u.size() % ranks == 0 ? SIZE_MAX : padded);
      if (u.size() % ranks != 0) padded += u.slice * ranks;
    }
    gather_pad_ = VectorBuffer<T>("strata::zero::gather_padded", padded);
  } else {
    sync_ = std::make_unique<GradientSync<T>>(ctx, mesh_.dp(), stage_, sync, precision.loss_scaling);
    updated = stage_.params();
    grads_ = stage_.grads();
    if (config.no_decay_bias_norm) no_decay = no_decay_ranges(stage_.parameters(), 0, stage_.num_params());
  }
  optimizer_ = std::make_unique<Optimizer<T>>(config, updated.extent(0));
  if (config.no_decay_bias_norm) optimizer_->set_no_decay(no_decay);
  mixed_ = std::make_unique<MixedPrecision<T>>(ctx, precision, updated);
  // The working weights outside this rank's shard are rounded too (the
  // shard's owner rounds the same values the same way).
  if (precision.precision != Precision::fp32) {
    if (!gather_) round_to_precision(ctx, precision.precision, stage_.padded_params());
    stage_.set_weights_rounded(true);  // 16-bit-input GEMMs (cuBLAS)
  }
  if (gather_) gather_->shard_changed();  // the pinned units from the (rounded) shard
  count_gradients(ties);
}

template <class T>
ShardedOptimizer<T>::~ShardedOptimizer() {
  if (rs_) stage_.set_piece_hooks({});
}

template <class T>
void ShardedOptimizer<T>::begin(StepInfo& info) {
  if (rs_) rs_->begin(info);
  else sync_->begin(info);
}

template <class T>
void ShardedOptimizer<T>::backward_begins(bool last) {
  last_ = last;
  if (rs_) rs_->backward_begins(last);
}

template <class T>
bool ShardedOptimizer<T>::communicates_per_pass() const {
  return gather_ || (rs_ && !rs_->keeps_gradients());
}

template <class T>
void ShardedOptimizer<T>::idle_forward() {
  if (!gather_) return;
  for (const auto& [p, pass] : stage_.piece_calls(false)) gather_->before_piece(p, pass);
}

template <class T>
void ShardedOptimizer<T>::idle_backward(bool last) {
  backward_begins(last);
  if (!rs_) {
    for (std::size_t k = stage_.num_layers(); k-- > 0;) layer_done(k);
    return;
  }
  // The calls a backward makes (the same collectives as the other ranks').
  for (const auto& [p, pass] : stage_.piece_calls(true)) {
    if (gather_) gather_->before_piece(p, pass);
    if (pass == Pass::backward) rs_->piece_done(p);
  }
}

template <class T>
void ShardedOptimizer<T>::layer_done(std::size_t k) {
  // Sharded: the stage's piece hooks reduce-scatter. Else the buckets start
  // in the last backward; those of the layers up to the held one wait for
  // the tie sum (in order: the later ones too).
  if (!rs_ && last_ && (!holds_ || k > held_)) sync_->layer_done(k);
}

template <class T>
void ShardedOptimizer<T>::count_gradients(const StageTies<T>& ties) {
  // Replicas over the data-parallel group (summed gradients are identical
  // there, unless sharding gives each rank its own shard) and over the
  // tensor group (unsharded layers, RowParallelLinear's bias) count on rank
  // 0 of the group only.
  const bool dp_counts = rs_ || mesh_.dp_rank() == 0;
  const bool tp_first = mesh_.tp_rank() == 0;
  counted_.clear();
  if (!dp_counts) return;
  std::vector<std::pair<std::size_t, std::size_t>> flat;  // in the stage's flat order
  auto count = [&](std::size_t first, std::size_t last) {
    if (first >= last) return;
    if (!flat.empty() && flat.back().second == first) flat.back().second = last;
    else flat.push_back({first, last});
  };
  for (std::size_t i = 0; i < stage_.num_layers(); ++i) {
    std::size_t first = stage_.param_offset(i);
    const std::size_t last = stage_.param_offset(i + 1);
    // A copy of a tied weight on another stage counts there.
    if (const CrossTie* t = ties.copy_at(i)) first += t->size;
    const TensorShard<T>* sharded = tensor_shard(stage_.layer(i));
    if (!sharded) {
      if (tp_first) count(first, last);
      continue;
    }
    const std::vector<std::uint8_t> once = counted_once(*sharded, mesh_.tp_rank());
    for (std::size_t k = 0; k < once.size(); ++k)
      if (once[k]) count(first + k, first + k + 1);
  }
  if (!rs_) {
    counted_ = std::move(flat);
    return;
  }
  // Sharded: the counted values within this rank's pieces, in shard order.
  for (const ShardPiece& p : rs_->map().pieces(mesh_.dp_rank()))
    for (const auto& [first, last] : flat) {
      const std::size_t lo = std::max(first, p.flat), hi = std::min(last, p.flat + p.count);
      if (lo < hi) counted_.push_back({p.shard + lo - p.flat, p.shard + hi - p.flat});
    }
}

template <class T>
double ShardedOptimizer<T>::unique_sumsq() {
  if (ctx_.reproducible) {
    // The same scale on every rank (the largest gradient anywhere), then
    // exact sums: the same bits however the model is cut.
    double largest = 0;
    for (const auto& r : counted_)
      largest = std::max(largest, largest_magnitude<T>(ctx_, Kokkos::subview(grads_, r)));
    largest = mesh_.world().allreduce_value(largest, comm::ReduceOp::max);
    if (!(largest > 0) || !std::isfinite(largest)) return largest * largest;
    const int e = squares_scale(largest);
    ExactSum sum;
    for (const auto& r : counted_)
      sum += scaled_sum_of_squares<T>(ctx_, Kokkos::subview(grads_, r), e);
    return std::ldexp(mesh_.world().allreduce_exact(sum).value(), 2 * e);
  }
  double sum = 0;
  for (const auto& r : counted_) sum += sum_of_squares<T>(ctx_, Kokkos::subview(grads_, r));
  return sum;
}

template <class T>
void ShardedOptimizer<T>::step(StepInfo& info) {
  if (rs_) rs_->finish();
  else sync_->finish();
  // Clipping and the skip decision of loss scaling need the norm of the
  // whole model's gradients: every rank adds its share, and all agree.
  std::optional<double> sumsq;
  if (mixed_->fused() && mesh_.world().size() > 1)
    sumsq = ctx_.reproducible ? unique_sumsq() : mesh_.world().allreduce_value(unique_sumsq());
  mixed_->step(ctx_, *optimizer_, grads_, info, sumsq);
  if (gather_) gather_->shard_changed();
  else if (rs_) gather_params();
}

template <class T>
void ShardedOptimizer<T>::gather_params() {
  // Every unit's updated slices, from every rank, into the stage's
  // parameters: all launched, then waited for.
  comm::Communicator& dp = mesh_.dp();
  const auto& units = rs_->map().units();
  T* params = stage_.params().data();
  ctx_.exec.fence();  // the optimizer's update is complete
  std::vector<comm::Handle> handles;
  handles.reserve(units.size());
  for (std::size_t u = 0; u < units.size(); ++u) {
    const ShardUnit& unit = units[u];
    if (unit.size() == 0) continue;
    T* recv = gather_at_[u] == SIZE_MAX ? params + unit.first : gather_pad_.data() + gather_at_[u];
    handles.push_back(dp.iallgather(shard_params_.data() + unit.shard, recv, unit.slice,
                                    comm::data_type_of<T>()));
  }
  for (auto& h : handles) h.wait();
  for (std::size_t u = 0; u < units.size(); ++u)
    if (gather_at_[u] != SIZE_MAX && units[u].size() > 0)
      Kokkos::deep_copy(ctx_.exec, Vector<T>(params + units[u].first, units[u].size()),
                        ConstVector<T>(gather_pad_.data() + gather_at_[u], units[u].size()));
}

template <class T>
void ShardedOptimizer<T>::set_params(const std::vector<T>& stage_values) {
  const bool mixed = mixed_->master().data() != (rs_ ? shard_params_.data() : stage_.params().data());
  const std::vector<T> mine = rs_ ? rs_->map().to_shard(stage_values, mesh_.dp_rank()) : stage_values;
  // The values the optimizer updates (the master weights with a 16-bit
  // precision), then the working copies rounded from them.
  copy_from_host<T>(mine, mixed_->master());
  if (mixed) mixed_->sync_working(ctx_);
  if (gather_) gather_->shard_changed();
  else if (rs_) gather_params();
}

template class ShardedOptimizer<float>;
template class ShardedOptimizer<double>;

}  // namespace strata
