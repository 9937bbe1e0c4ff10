// Token embedding: integer ids in, one learned vector per id out, as
// PyTorch's nn.Embedding(vocab, dim).
//
// Input: per-sample shape {T}, the token ids as values (exact in float below
// 2^24; the data readers check them against the vocabulary). Output {T, dim}.
// Parameters: weight (vocab, dim), row-major, initialised N(0, std^2)
// (std 0.02 by default, as GPT-2; PyTorch's own default is N(0, 1)).
//
// forward:  y(b, t, :) = W(id(b, t), :)
// backward: dW(id, :) += dy(b, t, :) over the positions that hold id, in
//           position order: only the rows a batch used are touched, and the
//           sum does not depend on the thread count. The ids have no gradient.
//
// A forward with an id outside [0, vocab) or not a whole number throws a
// `data` error naming the layer and how many ids were bad. Under vocabulary
// parallelism a layer holds a block of rows (set_vocab_shard).
#pragma once

#include "layers/capabilities.hpp"

namespace strata {

template <class T>
class Embedding final : public Layer<T>, public ExactSums, public TensorShardable {
 public:
  Embedding(std::size_t vocab, std::size_t dim, double std = 0.02);

  // The layer a model file describes: vocab, dim, std (layers/registry.hpp).
  static LayerPtr<T> from_args(LayerArgs& args, const Shape& in, LayerBuild& build);

  std::string name() const override;
  std::string reproducibility_issue() const override { return ""; }
  Shape output_shape(const Shape& in) const override;
  // weight (vocab, dim) from N(0, std^2).
  std::vector<ParamSpec> params() const override {
    return {{"weight", Shape{vocab_, dim_}, ParamGroup::decay, ParamInit::normal(std_)}};
  }
  void add_costs(std::vector<LayerCost>& out) const override { out.push_back(this->cost(0)); }
  void bind(Vector<T> params, Vector<T> grads) override;
  void forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>& saved) override;
  void backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>& saved) override;
  bool backward_reads_output() const override { return false; }
  TensorSplit tensor_split() const override { return TensorSplit::vocabulary; }

  std::size_t vocab() const { return vocab_; }
  std::size_t dim() const { return dim_; }
  double init_std() const { return std_; }
  // Vocabulary parallelism (strategies/vocab_parallel.hpp): this layer holds
  // rows [first, first + vocab) of a vocabulary of `total` ids. Ids are
  // checked against `total`; forward writes zeros for ids outside the
  // shard, and backward leaves their rows alone. Rows past `total` (a
  // padded vocabulary's last block) are never read.
  void set_vocab_shard(std::size_t first, std::size_t total);

 private:
  std::size_t vocab_, dim_;
  double std_;
  std::size_t first_ = 0, total_;  // set_vocab_shard (whole: 0, vocab_)
  Matrix<T> weight_, dweight_;  // (vocab, dim)
};

// The vocabulary of `layer` when it is an Embedding (a language model's
// first layer), else 0: what data readers check token ids against.
template <class T>
std::size_t embedding_vocabulary(const Layer<T>& layer);

}  // namespace strata
