#include "strategies/sharded_optimizer.hpp"

#include "strategies/tensor_parallel.hpp"

#include <algorithm>
#include <cmath>
#include <optional>

namespace strata {

template <class T>
ShardedOptimizer<T>::ShardedOptimizer(Context& ctx, Mesh& mesh, Sequential<T>& stage,
                                      const MixedPrecisionOptions& precision,
                                      const GradSyncOptions& sync, int zero,
                                      const OptimizerConfig& config, const StageTies<T>& ties)
    : ctx_(ctx), mesh_(mesh), stage_(stage), zero_(zero) {
  // Gradient sums over the data-parallel group (buckets during the last
  // backward; with ZeRO-1 a reduce-scatter onto this rank's block).
  sync_ = std::make_unique<GradientSync<T>>(ctx, mesh_.dp(), stage_, sync, zero == 1,
                                            precision.loss_scaling);
  owned_ = sync_->owned();  // the whole stage when unsharded or dp is 1
  const std::size_t updated = owned_.second - owned_.first;
  optimizer_ = std::make_unique<Optimizer<T>>(config, updated);
  if (config.no_decay_bias_norm)
    optimizer_->set_no_decay(no_decay_ranges(stage_.parameters(), owned_.first, updated));
  mixed_ = std::make_unique<MixedPrecision<T>>(ctx, precision,
                                               Kokkos::subview(stage_.padded_params(), owned_));
  // The working weights outside this rank's block are rounded too (the
  // block's owner rounds the same values the same way).
  if (precision.precision != Precision::fp32) {
    round_to_precision(ctx, precision.precision, stage_.padded_params());
    stage_.set_weights_rounded(true);  // 16-bit-input GEMMs (cuBLAS)
  }
  count_gradients(ties);
}

template <class T>
void ShardedOptimizer<T>::count_gradients(const StageTies<T>& ties) {
  // Replicas over the data-parallel group (summed gradients are identical
  // there, unless ZeRO-1 gives each rank its own block) and over the tensor
  // group (unsharded layers, RowParallelLinear's bias) count on rank 0 of
  // the group only.
  const bool dp_counts = zero_ == 1 || mesh_.dp_rank() == 0;
  const bool tp_first = mesh_.tp_rank() == 0;
  counted_.clear();
  if (!dp_counts) return;
  auto count = [&](std::size_t first, std::size_t last) {
    // Within this rank's ZeRO-1 block (the whole stage without ZeRO).
    first = std::max(first, owned_.first);
    last = std::min(last, owned_.second);
    if (first >= last) return;
    if (!counted_.empty() && counted_.back().second == first) counted_.back().second = last;
    else counted_.push_back({first, last});
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
}

template <class T>
double ShardedOptimizer<T>::unique_sumsq() {
  if (ctx_.reproducible) {
    // The same scale on every rank (the largest gradient anywhere), then
    // exact sums: the same bits however the model is cut.
    double largest = 0;
    for (const auto& r : counted_)
      largest = std::max(largest, largest_magnitude<T>(ctx_, Kokkos::subview(stage_.padded_grads(), r)));
    largest = mesh_.world().allreduce_value(largest, comm::ReduceOp::max);
    if (!(largest > 0) || !std::isfinite(largest)) return largest * largest;
    const int e = squares_scale(largest);
    ExactSum sum;
    for (const auto& r : counted_)
      sum += scaled_sum_of_squares<T>(ctx_, Kokkos::subview(stage_.padded_grads(), r), e);
    return std::ldexp(mesh_.world().allreduce_exact(sum).value(), 2 * e);
  }
  double sum = 0;
  for (const auto& r : counted_)
    sum += sum_of_squares<T>(ctx_, Kokkos::subview(stage_.padded_grads(), r));
  return sum;
}

template <class T>
void ShardedOptimizer<T>::step(StepInfo& info) {
  comm::Communicator& dp = mesh_.dp();
  Vector<T> params = stage_.padded_params();
  Vector<T> my_grads = Kokkos::subview(stage_.padded_grads(), owned_);
  // ZeRO-1: each rank has the sum of one block of the padded flat buffers,
  // updates it, then everyone gathers the updated parameters.
  sync_->finish();
  // Clipping and the skip decision of loss scaling need the norm of the
  // whole model's gradients: every rank adds its share, and all agree.
  std::optional<double> sumsq;
  if (mixed_->fused() && mesh_.world().size() > 1)
    sumsq = ctx_.reproducible ? unique_sumsq() : mesh_.world().allreduce_value(unique_sumsq());
  mixed_->step(ctx_, *optimizer_, my_grads, info, sumsq);
  if (zero_ == 1 && dp.size() > 1) {
    ctx_.exec.fence();
    dp.allgather(Vector<T>(Kokkos::subview(params, owned_)), params);
  }
}

template class ShardedOptimizer<float>;
template class ShardedOptimizer<double>;

}  // namespace strata
