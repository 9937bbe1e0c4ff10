// Layer normalisation over the features of each row, with a learned scale
// (gamma, initialised to 1) and shift (beta, initialised to 0), as PyTorch's
// nn.LayerNorm(features, eps), over the last dimension of the input shape.
//
// forward:  y = (x - mean) * rstd * gamma + beta, rstd = 1 / sqrt(var + eps)
//           (biased variance); mean and rstd are kept per row for backward.
// backward: dgamma += sum_rows dy * xhat; dbeta += sum_rows dy;
//           dx = rstd * (dy*gamma - mean(dy*gamma) - xhat * mean(dy*gamma*xhat))
#pragma once

#include "layers/capabilities.hpp"

#include <vector>

namespace strata {

template <class T>
class LayerNorm final : public Layer<T>, public ExactSums {
 public:
  explicit LayerNorm(std::size_t features, double eps = 1e-5);

  // The layer a model file describes (layers/registry.hpp).
  static LayerPtr<T> from_args(LayerArgs& args, const Shape& in, LayerBuild& build);

  std::string name() const override;
  std::string reproducibility_issue() const override { return ""; }
  Shape output_shape(const Shape& in) const override;
  // weight (ones) and bias (zeros), features values each.
  std::vector<ParamSpec> params() const override {
    return {{"weight", Shape{features_}, ParamGroup::no_decay, ParamInit::constant(1)},
            {"bias", Shape{features_}, ParamGroup::no_decay, ParamInit::constant(0)}};
  }
  void bind(Vector<T> params, Vector<T> grads) override;
  void forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>& saved) override;
  void backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>& saved) override;
  bool backward_reads_output() const override { return false; }  // mean, rstd and x
  // Kept: mean and rstd per row (samples x positions).
  std::size_t saved_size(std::size_t batch) const override { return 2 * batch * rows_per_sample(); }

 private:
  std::size_t features_;
  double eps_;
  Vector<T> gamma_, beta_, dgamma_, dbeta_;
  std::size_t rows_per_sample() const {
    return this->in_shape_.rank() ? this->in_shape_.numel() / features_ : 1;
  }
};

}  // namespace strata
