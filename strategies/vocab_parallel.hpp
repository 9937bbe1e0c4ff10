// Vocabulary parallelism (Megatron-LM's VocabParallelEmbedding and parallel
// cross-entropy): a language model's token embedding and its head split over
// the ranks of a tensor-parallel group by token id, so that no rank holds the
// whole (vocab, dim) weight or the whole logits.
//
//   VocabParallelEmbedding(vocab, dim): rank t holds rows
//     [t * share, (t+1) * share) of the weight, share = ceil(vocab / tp)
//     (VocabSplit: rows past the vocabulary are padding, zeros that no id
//     reaches; Megatron-LM pads its vocabulary the same way). forward: each rank
//     writes the rows of the ids it holds and zeros elsewhere, one allreduce
//     (sum) makes the whole output on every rank. backward: each rank adds
//     into its own rows only; no communication.
//   The head (strategies/tensor_parallel.hpp: the last Linear of a model
//     trained with cross-entropy, column-parallel) leaves each rank the
//     logits of its own classes; tied to the embedding, its weight shard is
//     the embedding's shard (the same rows), on the same rank.
//   VocabParallelCrossEntropy: softmax cross-entropy over logits split by
//     class: per position the max (allreduce max), then the sum of
//     exp(z - max) and the target's logit (one allreduce sum of both), give
//     the loss on every rank; the gradient softmax - onehot is local. Three
//     values per position cross the group, never the logits. A padded
//     vocabulary's classes are left out (gradient 0).
#pragma once

#include "backends/comm/communicator.hpp"
#include "layers/embedding.hpp"
#include "layers/loss.hpp"
#include "strategies/tensor_parallel.hpp"

namespace strata {

template <class T>
class VocabParallelEmbedding final : public Layer<T>, public TensorShard<T>, public ExactSums {
 public:
  // whole: the single-rank embedding (its initialisation); throws config
  // when tp does not divide its vocabulary.
  VocabParallelEmbedding(std::unique_ptr<Embedding<T>>&& whole, comm::Communicator& tp);

  std::string name() const override;
  std::string reproducibility_issue() const override { return local_.reproducibility_issue(); }
  Shape output_shape(const Shape& in) const override { return local_.output_shape(in); }
  void set_input_shape(const Shape& in) override;
  std::vector<ParamSpec> params() const override { return local_.params(); }
  // Each rank's rows of the output, summed over the group in forward.
  void add_costs(std::vector<LayerCost>& out) const override {
    out.push_back(this->cost(0));
    out.back().tp_forward = static_cast<double>(this->output_shape(this->input_shape()).numel());
  }
  void bind(Vector<T> params, Vector<T> grads) override { local_.bind(params, grads); }
  void init(HostVector<T> params, Init scheme, std::uint64_t seed,
            std::uint64_t layer_index) const override;
  void forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>& saved) override;
  void backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>& saved) override {
    local_.backward(ctx, dy, dx, saved);
  }
  bool backward_reads_output() const override { return false; }

  std::size_t full_num_params() const override { return whole_->num_params(); }
  std::size_t shard_size() const override { return local_.num_params(); }
  void shard_map(int r, std::size_t* index, std::uint8_t* replica) const override;

 private:
  std::unique_ptr<Embedding<T>> whole_;
  comm::Communicator& tp_;
  VocabSplit split_;
  Embedding<T> local_;
};

template <class T>
class VocabParallelCrossEntropy final : public Loss<T> {
 public:
  // This rank holds classes [first_class, first_class + share) of `classes`
  // per position (VocabSplit: the classes past `classes` are padding).
  VocabParallelCrossEntropy(comm::Communicator& tp, std::size_t first_class, std::size_t classes);

  std::string name() const override { return "vocabulary-parallel softmax cross-entropy"; }
  LossKind kind() const override { return LossKind::cross_entropy; }
  void check(std::size_t batch, std::size_t width, const Targets<T>& t) const override;
  ExactSum forward_backward(Context& ctx, ConstMatrix<T> out, const Targets<T>& t,
                          Matrix<T> dout, T scale) override;
  // Whether each label's class holds the largest logit over all ranks
  // (ties to the smallest class, as count_correct): the same on every rank.
  std::size_t count_correct(Context& ctx, ConstMatrix<T> out, Labels labels) override;

 private:
  comm::Communicator& tp_;
  std::size_t first_, classes_, share_, held_ = 0;
  VectorBuffer<T> stats_;  // per position: max, sum of exp, target logit
  Kokkos::View<double*, MemSpace> exact_;  // --reproducible: the sums as exact pairs
};

}  // namespace strata
