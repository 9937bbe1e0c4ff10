// 2-D pooling over images (C, H, W) per sample, as PyTorch:
//   MaxPool2d(kernel, stride = kernel, padding, dilation): padding never wins
//     (PyTorch pads with -inf and requires padding <= kernel / 2); ties and
//     NaNs resolve as PyTorch's CPU kernel does (the first maximum in row-major
//     window order; the last NaN wins and propagates);
//   AvgPool2d(kernel, stride = kernel, padding, count_include_pad = true):
//     the mean over the window, padding counted as zeros unless
//     count_include_pad = false;
//   global average pooling: the mean of each channel, output {C} (PyTorch's
//     x.mean((2, 3)), or AdaptiveAvgPool2d(1) followed by flatten).
// Backward recomputes the window maxima from the saved input (nothing saved),
// one image plane per item, its windows in order: deterministic, no atomics.
#pragma once

#include "layers/layer.hpp"
#include "layers/window2d.hpp"

namespace strata {

enum class PoolKind { max, avg, global_avg };

template <class T>
class Pool2d final : public Layer<T> {
 public:
  // global_avg ignores the window (it covers the whole image).
  Pool2d(PoolKind kind, const Window2d& window, bool count_include_pad = true);

  // The layers a model file describes: "maxpool2d", "avgpool2d" (kernel,
  // stride, padding, dilation / count_include_pad) and "global_avgpool".
  template <PoolKind kind>
  static LayerPtr<T> from_args(LayerArgs& args, const Shape& in, LayerBuild& build);

  std::string name() const override;
  Shape output_shape(const Shape& in) const override;
  void set_input_shape(const Shape& in) override;
  void add_costs(std::vector<LayerCost>& out) const override;
  void forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>& saved) override;
  void backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>& saved) override;
  bool backward_reads_input() const override { return kind_ == PoolKind::max; }
  bool backward_reads_output() const override { return false; }

 private:
  PoolKind kind_;
  Window2d win_;
  bool count_include_pad_;
  std::size_t c_ = 0, h_ = 0, w_ = 0, oh_ = 0, ow_ = 0;
  // The window over an h x w image (the whole image for global_avg).
  Window2d window(std::size_t h, std::size_t w) const;
};

}  // namespace strata
