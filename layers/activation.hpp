// Elementwise activations: ReLU, GELU (exact, erf form), Tanh, Sigmoid.
//
// forward:  y = f(x)           x, y: (batch, features)
// backward: dx = dy * f'(x)    f' computed from x or from y, whichever is cheaper
// dx may alias dy (elementwise).
#pragma once

#include "layers/layer.hpp"

namespace strata {

enum class ActivationKind { relu, gelu, tanh, sigmoid };

ActivationKind parse_activation(const std::string& name);  // throws config
const char* to_string(ActivationKind kind);

template <class T>
class Activation final : public Layer<T> {
 public:
  explicit Activation(ActivationKind kind) : kind_(kind) {}

  std::string name() const override;
  std::size_t out_features(std::size_t in) const override { return in; }
  void forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y) override;
  void backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx) override;

  ActivationKind kind() const { return kind_; }

 private:
  ActivationKind kind_;
  ConstMatrix<T> x_, y_;  // input and output of the last forward
};

template <class T>
LayerPtr<T> make_activation(ActivationKind kind) {
  return std::make_unique<Activation<T>>(kind);
}

}  // namespace strata
