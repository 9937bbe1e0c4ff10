// Layer normalisation over the features of each row, with a learned scale
// (gamma, initialised to 1) and shift (beta, initialised to 0), as PyTorch's
// nn.LayerNorm(features, eps), over the last dimension of the input shape.
//
// forward:  y = (x - mean) * rstd * gamma + beta, rstd = 1 / sqrt(var + eps)
//           (biased variance); mean and rstd are kept per row for backward.
// backward: dgamma += sum_rows dy * xhat; dbeta += sum_rows dy;
//           dx = rstd * (dy*gamma - mean(dy*gamma) - xhat * mean(dy*gamma*xhat))
#pragma once

#include "layers/layer.hpp"

#include <vector>

namespace strata {

template <class T>
class LayerNorm final : public Layer<T> {
 public:
  explicit LayerNorm(std::size_t features, double eps = 1e-5);

  // The layer a model file describes (layers/registry.hpp).
  static LayerPtr<T> from_args(LayerArgs& args, const Shape& in, LayerBuild& build);

  std::string name() const override;
  Shape output_shape(const Shape& in) const override;
  std::vector<ParamInfo> param_table() const override;
  std::size_t num_params() const override { return 2 * features_; }
  void bind(Vector<T> params, Vector<T> grads) override;
  void init(HostVector<T> params, Init scheme, std::uint64_t seed,
            std::uint64_t layer_index) const override;
  void reserve(std::size_t batch, std::size_t in) override;
  void forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y) override;
  void backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx) override;
  bool backward_reads_output() const override { return false; }  // mean, rstd and x
  void set_slots(std::size_t n) override {
    Layer<T>::set_slots(n);
    x_.resize(n);
  }
  std::size_t workspace_bytes(std::size_t max_batch, std::size_t slots) const override {
    // mean and rstd per row (samples x positions)
    const std::size_t rows = this->in_shape_.rank() ? this->in_shape_.numel() / features_ : 1;
    return 2 * max_batch * rows * slots * sizeof(T);
  }

 private:
  std::size_t features_;
  double eps_;
  Vector<T> gamma_, beta_, dgamma_, dbeta_;
  std::size_t max_batch_ = 0;
  VectorBuffer<T> mean_, rstd_;  // (slots * max batch): slot s at s * max batch
  std::vector<ConstMatrix<T>> x_ = std::vector<ConstMatrix<T>>(1);  // input, per slot
};

}  // namespace strata
