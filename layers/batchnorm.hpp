// Batch normalisation over the channel dimension (the first of the
// per-sample shape: {C}, {C, L} or {C, H, W}), as PyTorch's BatchNorm1d /
// BatchNorm2d with affine = true and track_running_stats = true:
//
// training:   statistics of each channel over the micro-batch's samples and
//             positions (n values): mean, biased variance var;
//             y = (x - mean) / sqrt(var + eps) * gamma + beta;
//             running_mean = (1 - momentum) running_mean + momentum mean,
//             running_var  = (1 - momentum) running_var + momentum var n / (n - 1)
//             (the unbiased variance), num_batches_tracked += 1.
// evaluation: the running statistics instead of the micro-batch's.
// backward:   dgamma += sum dy xhat; dbeta += sum dy;
//             training: dx = gamma rstd (dy - mean(dy) - xhat mean(dy xhat)),
//             evaluation: dx = gamma rstd dy.
//
// Each rank (and each pipeline micro-batch) normalises with the statistics of
// the samples it holds, as PyTorch's BatchNorm under DDP or GPipe, unless the
// model is trained with SyncBatchNorm (sync_batchnorm = true in the model
// file, strata-train --sync-bn): then data parallelism gives the layer its
// BatchGroup, and the statistics are those of the whole batch over every
// rank, as PyTorch's SyncBatchNorm: forward sums each channel's values and
// count over the ranks, then the squared deviations from the global mean
// (two collectives: the same two-pass arithmetic as one rank, weighted by
// each rank's samples, uneven or empty shards included); backward sums
// sum(dy) and sum(dy xhat) (one collective). The running statistics are then
// the same on every rank. The running
// statistics are buffers (checkpointed by name: running_mean, running_var,
// num_batches_tracked). A recomputing block's second forward does not update
// them (Saved::recomputing).
//
// A ReLU right after it runs inside its kernels (FusedActivation, which
// Sequential asks for): y = relu(normalised), and backward takes dy times
// relu' at y, which x gives again, in place of dy: the bits of the two
// layers apart, with one pass over the activation where they made five.
#pragma once

#include "layers/batch_group.hpp"
#include "layers/capabilities.hpp"

#include <cstdint>
#include <vector>

namespace strata {

template <class T>
class BatchNorm final : public Layer<T>,
                        public Buffers<T>,
                        public ExactSums,
                        public BatchStatistics<T>,
                        public FusedActivation {
 public:
  // sync: SyncBatchNorm, with the BatchGroup data parallelism gives it.
  BatchNorm(std::size_t channels, double eps = 1e-5, double momentum = 0.1, bool sync = false);

  // The layer a model file describes: "batchnorm" (eps, momentum).
  static LayerPtr<T> from_args(LayerArgs& args, const Shape& in, LayerBuild& build);

  std::string name() const override;
  Shape output_shape(const Shape& in) const override;
  // weight (ones) and bias (zeros), one per channel.
  std::vector<ParamSpec> params() const override {
    return {{"weight", Shape{channels_}, ParamGroup::no_decay, ParamInit::constant(1)},
            {"bias", Shape{channels_}, ParamGroup::no_decay, ParamInit::constant(0)}};
  }
  void bind(Vector<T> params, Vector<T> grads) override;
  std::vector<BufferInfo> buffer_table() const override;
  std::vector<double> read_buffer(std::size_t k) const override;
  void write_buffer(std::size_t k, const std::vector<double>& values) override;
  void add_costs(std::vector<LayerCost>& out) const override {
    out.push_back(this->cost(4.0 * static_cast<double>(this->in_shape_.numel())));
  }
  // Kept per micro-batch: the mean and 1 / sqrt(var + eps) of each channel.
  std::size_t saved_size(std::size_t batch) const override { return batch > 0 ? 2 * channels_ : 0; }
  void reserve(std::size_t batch, std::size_t in) override;
  std::size_t workspace_bytes(std::size_t batch) const override;
  void forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>& saved) override;
  void backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>& saved) override;
  bool backward_reads_output() const override { return false; }
  // --reproducible: SyncBatchNorm only, whose statistics are the whole
  // batch's (exact sums over the ranks) whatever the split.
  std::string reproducibility_issue() const override {
    return sync_ ? ""
                 : "normalises each rank's samples by their own statistics, which change with the "
                   "split; use SyncBatchNorm (--sync-bn, or sync_batchnorm = true in the model file)";
  }
  bool set_batch_group(BatchGroup<T>* group) override {
    if (!sync_) return false;
    group_ = group;
    return true;
  }

  bool takes(ActivationKind kind) const override;
  void fuse(ActivationKind kind) override;

  std::uint64_t batches_tracked() const { return tracked_; }

  // --reproducible's statistics and their gradients (forward and backward
  // call them): exact sums over the whole batch (every rank of the group),
  // the same bits on any split. Public: nvcc refuses device lambdas in
  // private members.
  void exact_statistics(Context& ctx, ConstMatrix<T> x, Saved<T>& saved);
  void exact_backward_sums(Context& ctx, ConstMatrix<T> dy, const Saved<T>& saved);
  // The training statistics otherwise: per channel in double, two-stage
  // (backends/segment_sums.hpp), over the group when synced.
  void batch_statistics(Context& ctx, ConstMatrix<T> x, Saved<T>& saved);
  // Training on host threads without a group to sum over: one item per
  // channel, its statistics or gradient sums (the bits of the kernels above)
  // and then its output or input gradient, from values still in cache.
  void forward_by_channel(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>& saved);
  static constexpr std::size_t forward_by_channel_row_bytes = 2048;  // the rows of one sample and channel
  static constexpr std::size_t backward_by_channel_row_bytes = 64;
  void backward_by_channel(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>& saved);

 private:
  std::size_t channels_;
  double eps_, momentum_;
  bool sync_;
  bool relu_ = false;  // a fused ReLU (fuse)
  Vector<T> gamma_, beta_, dgamma_, dbeta_;
  VectorBuffer<T> running_mean_, running_var_;
  // Sums in double: the statistics (sums, count, squared deviations: 2 C +
  // 1) and the backward sums (2 C), or --reproducible's exact pairs (4 C + 2).
  Kokkos::View<double*, MemSpace> dsums_;
  Kokkos::View<double*, MemSpace> work_;  // segment_sums' partial sums
  VectorBuffer<T> sums_;  // backward: mean(dy) and mean(dy xhat) per channel
  BatchGroup<T>* group_ = nullptr;
  std::uint64_t tracked_ = 0;
  void require_values(std::size_t batch, std::size_t positions) const;  // more than one per channel
  bool synced() const { return group_ != nullptr && group_->size() > 1; }  // SyncBatchNorm over ranks
  void allocate();  // the running statistics and sums_, once
  double* workspace(std::size_t terms);  // work_, grown to segment_sums' need
  std::size_t positions() const {
    return this->in_shape_.rank() ? this->in_shape_.numel() / channels_ : 1;
  }
};

}  // namespace strata
