// A model as a sequence of layers whose parameters and gradients live in one
// flat buffer each (every layer holds subviews into them), with activation
// buffers sized once for the largest batch.
//
//   Sequential<float> model(784);
//   model.add(std::make_unique<Linear<float>>(784, 256));
//   model.add(make_activation<float>(ActivationKind::relu));
//   ...
//   model.build(max_batch);               // allocates everything, once
//   model.init(Init::kaiming_uniform, seed);
//   auto y = model.forward(ctx, x);        // x: (batch <= max_batch, 784)
//   ... loss writes dy into model.output_grad(batch) ...
//   model.backward(ctx);                   // accumulates into grads()
#pragma once

#include "layers/layer.hpp"

#include <functional>
#include <string>
#include <vector>

namespace strata {

template <class T>
class Sequential {
 public:
  explicit Sequential(std::size_t in_features);

  // Appends a layer; throws config (naming the layer's position) when it
  // cannot take the previous layer's output width. Not after build().
  Sequential& add(LayerPtr<T> layer);

  // Allocates the flat parameter and gradient buffers (gradients zeroed) and
  // the activation buffers for batches of up to max_batch rows.
  void build(std::size_t max_batch);
  bool built() const { return built_; }

  // Writes initial parameters (host-side counter-based generator, so the
  // same seed gives the same parameters on every backend).
  void init(Init scheme, std::uint64_t seed);

  // y = model(x); x: (batch, in_features) with batch <= max_batch, device
  // memory; must stay valid until backward. Returns (batch, out_features).
  ConstMatrix<T> forward(Context& ctx, ConstMatrix<T> x);
  // Buffer for the loss gradient of the last forward's batch.
  Matrix<T> output_grad() const;
  // Back-propagates output_grad() and accumulates into grads(). after_layer(i)
  // is called once layer i's gradients are written (launched: on GPUs the
  // kernels may still run; order on ctx.exec), from the last layer to the
  // first: data parallelism starts gradient communication there.
  void backward(Context& ctx, const std::function<void(std::size_t)>& after_layer = {});
  void zero_grad(Context& ctx);
  void set_training(bool training);
  void set_row_offset(std::size_t offset);  // see Layer::set_row_offset

  std::size_t in_features() const { return widths_.front(); }
  std::size_t out_features() const { return widths_.back(); }
  std::size_t max_batch() const { return max_batch_; }
  std::size_t num_layers() const { return layers_.size(); }
  std::size_t num_params() const { return offsets_.back(); }
  Layer<T>& layer(std::size_t i) { return *layers_[i]; }
  const Layer<T>& layer(std::size_t i) const { return *layers_[i]; }
  // Width of the input of layer i (i == num_layers(): the output width).
  std::size_t width(std::size_t i) const { return widths_[i]; }
  // Offset of layer i's parameters in the flat buffers.
  std::size_t param_offset(std::size_t i) const { return offsets_[i]; }

  Vector<T> params() const { return params_; }
  Vector<T> grads() const { return grads_; }

  // One line per layer with output width and parameter count.
  std::string summary() const;

  // After a forward and backward with a non-finite loss: names the first
  // layer (forward order) whose output holds a NaN or an Inf, else the first
  // (backward order) whose parameter gradients do; "" when none does. Used to
  // report where a numerical failure began.
  std::string first_nonfinite(Context& ctx) const;

 private:
  std::vector<LayerPtr<T>> layers_;
  std::vector<std::size_t> widths_;   // widths_[i]: input width of layer i
  std::vector<std::size_t> offsets_;  // offsets_[i]: first parameter of layer i
  std::size_t max_batch_ = 0;
  std::size_t batch_ = 0;  // rows of the last forward
  bool built_ = false;
  VectorBuffer<T> params_, grads_;
  std::vector<VectorBuffer<T>> acts_;  // acts_[i]: output of layer i (flat)
  VectorBuffer<T> grad_a_, grad_b_;    // ping-pong input gradients (flat)
  VectorBuffer<T> dout_;               // gradient of the model output (flat)
  ConstMatrix<T> input_;
};

}  // namespace strata
