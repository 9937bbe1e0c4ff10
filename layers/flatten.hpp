// Flatten: a per-sample shape {C, H, W} (any rank) becomes {C H W}, as
// PyTorch's nn.Flatten() on a batch. Storage is one row per sample either way,
// so forward and backward copy the rows unchanged.
#pragma once

#include "layers/layer.hpp"

namespace strata {

template <class T>
class Flatten final : public Layer<T> {
 public:
  static LayerPtr<T> from_args(LayerArgs& args, const Shape& in, LayerBuild& build);

  std::string name() const override { return "Flatten"; }
  Shape output_shape(const Shape& in) const override { return Shape{in.numel()}; }
  void add_costs(std::vector<LayerCost>& out) const override { out.push_back(this->cost(0)); }
  void forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>& saved) override;
  void backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>& saved) override;
  bool backward_reads_input() const override { return false; }
  bool backward_reads_output() const override { return false; }
};

}  // namespace strata
