// Sequence parallelism (Megatron-LM's, Korthikanti et al. 2022) on top of
// tensor parallelism (strategies/tensor_parallel.hpp): between the
// tensor-parallel pairs, the residual stream, LayerNorm and Dropout run on
// a shard of the sequence instead of the whole of it on every rank.
//
//   rank t of the tensor group holds positions [t T/tp, (t+1) T/tp) of
//   every sample (a sample's row of T x C values is cut into tp runs);
//   a column-parallel Linear all-gathers its input along the sequence
//     (forward), and reduce-scatters its input gradient (backward, where
//     tensor parallelism alone allreduces it); it gathers its input again
//     in backward instead of keeping the whole sequence;
//   a row-parallel Linear reduce-scatters its partial output (forward,
//     instead of an allreduce), adds its bias on the shard, and all-gathers
//     its output gradient (backward);
//   the top-level block where the region begins cuts its input (whole on
//     every rank: the embeddings') to the rank's shard, and gathers its
//     input gradient; where the region ends before a whole layer, the last
//     block gathers its output.
// Parameters used on a shard of the sequence (LayerNorm's, the row-parallel
// bias) get a part of their gradient on each rank: each backward sums its
// contribution over the group before adding it (exact pairs under
// --reproducible, so results stay the same bits on any layout).
//
// The communication is that of tensor parallelism (an allreduce is a
// reduce-scatter plus an all-gather), plus the gather again in backward;
// what it saves is the whole-sequence activations of the layers between
// the pairs: with tp 2 about half a block's activations instead of a third.
#pragma once

#include "backends/comm/communicator.hpp"
#include "layers/block.hpp"
#include "layers/layer.hpp"
#include "strategies/sequence_shards.hpp"
#include "strategies/tensor_parallel.hpp"

#include <memory>
#include <string>

namespace strata {

// A layer with parameters that works on each position alone (LayerNorm) on a
// shard of the sequence: its gradient summed over the group.
template <class T>
class SequenceSummed final : public Layer<T>, public ExactSums {
 public:
  SequenceSummed(LayerPtr<T>&& inner, comm::Communicator& tp);

  std::string name() const override { return inner_->name(); }
  std::string reproducibility_issue() const override;
  Shape output_shape(const Shape& in) const override { return inner_->output_shape(in); }
  void set_input_shape(const Shape& in) override;
  std::vector<ParamSpec> params() const override { return inner_->params(); }
  void bind(Vector<T> params, Vector<T> grads) override;
  void init(HostVector<T> params, Init scheme, std::uint64_t seed,
            std::uint64_t layer_index) const override {
    inner_->init(params, scheme, seed, layer_index);
  }
  void add_costs(std::vector<LayerCost>& out) const override { inner_->add_costs(out); }
  void reserve(std::size_t batch, std::size_t in) override { inner_->reserve(batch, in); }
  std::size_t workspace_bytes(std::size_t max_batch) const override {
    return inner_->workspace_bytes(max_batch) + inner_->num_params() * sizeof(T);
  }
  std::size_t saved_size(std::size_t batch) const override { return inner_->saved_size(batch); }
  void forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>& saved) override;
  void backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>& saved) override;
  bool backward_reads_input() const override { return inner_->backward_reads_input(); }
  bool backward_reads_output() const override { return inner_->backward_reads_output(); }

 private:
  LayerPtr<T> inner_;
  comm::Communicator& tp_;
  SequenceSummedGrads<T> grads_;
};

// A top-level block at an edge of the sequence-parallel region: `entry`
// cuts its whole input to the rank's shard (and gathers the input
// gradient), `exit` gathers its output (and cuts the output gradient).
template <class T>
class SequenceEdgeBlock final : public ShardedBlock<T>, public SequenceScratchUser {
 public:
  SequenceEdgeBlock(std::vector<LayerPtr<T>> layers, bool residual, std::vector<std::string> names,
                    std::shared_ptr<SequenceShards> shards, bool entry, bool exit);

  std::string name() const override;
  Shape output_shape(const Shape& in) const override;
  void set_input_shape(const Shape& in) override;
  void reserve(std::size_t batch, std::size_t in) override;
  std::size_t workspace_bytes(std::size_t max_batch) const override;
  std::size_t saved_size(std::size_t batch) const override;
  void forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>& saved) override;
  void backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>& saved) override;
  bool backward_reads_input() const override { return true; }
  std::size_t sequence_scratch(std::size_t, bool) const override { return 0; }

 private:
  std::size_t in_shard() const { return inner_in_.numel(); }
  std::size_t out_shard() const { return inner_out_.numel(); }

  std::shared_ptr<SequenceShards> shards_;
  bool entry_, exit_;
  Shape inner_in_, inner_out_;  // the inner layers' input and output: shards
  VectorBuffer<T> own_;         // the output shard (exit) and input-gradient shard (entry)
  std::size_t max_batch_ = 0;
};

// Turns a tensor-parallel model's layers (make_tensor_parallel's, before
// they are added to a model) sequence-parallel from the first top-level
// block with a tensor-parallel pair to the end (a column-parallel head
// gathers its input) or, before a whole last layer, to the last such block.
// Throws config, naming the layer, for a layer in that region that mixes
// positions or whose parameters cannot be summed over the sequence.
template <class T>
void make_sequence_parallel(TensorParallelLayers<T>& model, comm::Communicator& tp);

}  // namespace strata
