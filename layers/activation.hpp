// Elementwise activations: ReLU, GELU (exact, erf form), Tanh, Sigmoid.
//
// forward:  y = f(x)           x, y: (batch, features)
// backward: dx = dy * f'(x)    f' from y for ReLU (y > 0 exactly when x > 0),
//                              Tanh and Sigmoid; from x for GELU
// Backward reads only the one it needs (with 16-bit storage only that one is
// kept). dx may alias dy (elementwise).
#pragma once

#include "layers/capabilities.hpp"

#include <vector>

namespace strata {

enum class ActivationKind { relu, gelu, tanh, sigmoid };

ActivationKind parse_activation(const std::string& name);  // throws config
const char* to_string(ActivationKind kind);

template <class T>
class Activation final : public Layer<T>, public TensorShardable {
 public:
  explicit Activation(ActivationKind kind) : kind_(kind) {}

  // The layer a model file describes (layers/registry.hpp): type K.
  template <ActivationKind K>
  static LayerPtr<T> from_args(LayerArgs&, const Shape&, LayerBuild&) {
    return std::make_unique<Activation<T>>(K);
  }

  std::string name() const override;
  Shape output_shape(const Shape& in) const override { return in; }
  void forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>& saved) override;
  void backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>& saved) override;
  TensorSplit tensor_split() const override { return TensorSplit::elementwise; }
  bool backward_reads_input() const override { return kind_ == ActivationKind::gelu; }
  bool backward_reads_output() const override { return kind_ != ActivationKind::gelu; }

  ActivationKind kind() const { return kind_; }

 private:
  ActivationKind kind_;
};

template <class T>
LayerPtr<T> make_activation(ActivationKind kind) {
  return std::make_unique<Activation<T>>(kind);
}

}  // namespace strata
