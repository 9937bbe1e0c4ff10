// Learned positional embedding: adds one learned vector per position, as
// GPT-2's wpe (an nn.Embedding(context, dim) indexed by 0..T-1 and added).
//
// Input and output: per-sample shape {T, dim}, T <= context (a longer
// sequence is a config error naming both). Parameters: weight (context, dim),
// initialised N(0, std^2) (std 0.02 by default, as GPT-2).
//
// forward:  y(b, t, :) = x(b, t, :) + W(t, :)
// backward: dW(t, :) += sum over b of dy(b, t, :) (samples in order); dx = dy
#pragma once

#include "layers/layer.hpp"

namespace strata {

template <class T>
class PositionEmbedding final : public Layer<T> {
 public:
  PositionEmbedding(std::size_t context, std::size_t dim, double std = 0.02);

  // The layer a model file describes: context, std (layers/registry.hpp).
  static LayerPtr<T> from_args(LayerArgs& args, const Shape& in, LayerBuild& build);

  std::string name() const override;
  std::string reproducibility_issue() const override { return ""; }
  Shape output_shape(const Shape& in) const override;
  std::size_t num_params() const override { return context_ * dim_; }
  std::vector<ParamInfo> param_table() const override;
  void bind(Vector<T> params, Vector<T> grads) override;
  void init(HostVector<T> params, Init scheme, std::uint64_t seed,
            std::uint64_t layer_index) const override;
  void forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>& saved) override;
  void backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>& saved) override;
  bool backward_reads_input() const override { return false; }
  bool backward_reads_output() const override { return false; }
  TensorSplit tensor_split() const override { return TensorSplit::none; }
  std::size_t decode_size(std::size_t) const override { return 0; }
  void decode(Context& ctx, ConstMatrix<T> x, Matrix<T> y, std::size_t position,
              std::size_t max_positions, Saved<T>& state) override;

  std::size_t context() const { return context_; }

 private:
  std::size_t context_, dim_;
  double std_;
  Vector<T> weight_, dweight_;  // (context * dim)
};

}  // namespace strata
