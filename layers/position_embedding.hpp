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

#include "layers/capabilities.hpp"

namespace strata {

template <class T>
class PositionEmbedding final : public Layer<T>, public ExactSums, public Decodable<T> {
 public:
  PositionEmbedding(std::size_t context, std::size_t dim, double std = 0.02);

  // The layer a model file describes: context, std (layers/registry.hpp).
  static LayerPtr<T> from_args(LayerArgs& args, const Shape& in, LayerBuild& build);

  std::string name() const override;
  std::string reproducibility_issue() const override { return ""; }
  Shape output_shape(const Shape& in) const override;
  // weight (context, dim) from N(0, std^2).
  std::vector<ParamSpec> params() const override {
    return {{"weight", Shape{context_, dim_}, ParamGroup::decay, ParamInit::normal(std_)}};
  }
  void bind(Vector<T> params, Vector<T> grads) override;
  void forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>& saved) override;
  void backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>& saved) override;
  bool backward_reads_input() const override { return false; }
  bool backward_reads_output() const override { return false; }
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
