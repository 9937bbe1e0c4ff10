// The geometry of a 2-D sliding window over a (C, H, W) image, shared by
// Conv2d and the pooling layers: kernel, stride, padding and dilation per
// axis, as PyTorch's nn.Conv2d / nn.MaxPool2d define them. Output size per
// axis: (in + 2 padding - dilation (kernel - 1) - 1) / stride + 1 (floor).
//
// Output position (oh, ow) reads input rows ih = oh stride_h - pad_h + kh dil_h
// for kh in [0, kernel_h) (and the same for columns); rows outside [0, H) are
// padding.
#pragma once

#include "layers/shape.hpp"

#include <array>
#include <cstddef>
#include <string>

namespace strata {

class LayerArgs;

struct Window2d {
  std::size_t kh = 1, kw = 1;  // kernel
  std::size_t sh = 1, sw = 1;  // stride
  std::size_t ph = 0, pw = 0;  // padding (zeros for a convolution, ignored by max pooling)
  std::size_t dh = 1, dw = 1;  // dilation

  // Reads kernel (required), stride (default `default_stride`, or the kernel
  // when it is {0, 0}), padding (0) and dilation (1) from a model file's layer.
  static Window2d from_args(LayerArgs& args, std::array<std::size_t, 2> default_stride);

  // Output rows and columns for an input of h x w; 0 when the window does
  // not fit (output_shape turns that into an error naming the layer).
  std::size_t out_h(std::size_t h) const;
  std::size_t out_w(std::size_t w) const;
  // "kernel 3x3, stride 1, padding 1" (only what differs from the defaults
  // after the kernel), for layer names.
  std::string str() const;
  // Checks that an input shape is an image (C, H, W) whose output is not
  // empty; throws config naming `layer`, the shape and the window.
  void check_input(const std::string& layer, const Shape& in) const;
};

}  // namespace strata
