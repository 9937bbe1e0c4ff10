// 2-D convolution over images (C, H, W) per sample, as PyTorch's nn.Conv2d:
// kernel, stride, padding (zeros), dilation and groups per axis, optional
// bias. Weight layout (out, in / groups, kernel_h, kernel_w), row-major, then
// the bias (out): PyTorch's state_dict layout.
//
// Computed as GEMMs over unfolded patches (im2col), in chunks of samples
// whose unfolded patches fit the workspace, with the same GEMM backends as
// Linear (N = n P for a chunk of n samples):
//   col(C K, N)     = im2col(x)                    P = out_h out_w, K = kernel_h kernel_w;
//                                                  row (c, kh, kw), column (sample, position):
//                                                  each run of out_w columns a shifted copy
//                                                  of an input row
//   yt(O, N)        = W col                        one GEMM (N, N) per group
//   y(b, o, p)      = yt(o, b P + p) + bias(o)     the NCHW output, runs of P values
// backward:
//   dyt(O, N)       = dy with channels as rows
//   dW             += dyt col^T                    GEMM (N, T) per group, col unfolded again
//   db(o)          += sum over b, p of dy(b, o, p)
//   dcol(C K, N)    = W^T dyt                      GEMM (T, N) per group, into col's buffer
//   dx              = col2im(dcol)                 each input row sums the patch rows that
//                                                  read it, in kernel order (no atomics)
// On the host the workspace is sized for the caches (a chunk's col is
// unfolded, multiplied and folded while it is still in the last-level
// cache); on a device it is large, for wide GEMMs.
#pragma once

#include "layers/layer.hpp"
#include "layers/window2d.hpp"

#include <vector>

namespace strata {

template <class T>
class Conv2d final : public Layer<T> {
 public:
  Conv2d(std::size_t in_channels, std::size_t out_channels, const Window2d& window,
         std::size_t groups = 1, bool bias = true);

  // The layer a model file describes (layers/registry.hpp): out (channels),
  // kernel, stride, padding, dilation, groups, bias.
  static LayerPtr<T> from_args(LayerArgs& args, const Shape& in, LayerBuild& build);

  std::string name() const override;
  Shape output_shape(const Shape& in) const override;
  void set_input_shape(const Shape& in) override;
  std::size_t num_params() const override { return weights() + (bias_ ? out_ : 0); }
  std::vector<ParamInfo> param_table() const override;
  double flops() const override;
  void bind(Vector<T> params, Vector<T> grads) override;
  void init(HostVector<T> params, Init scheme, std::uint64_t seed,
            std::uint64_t layer_index) const override;
  void reserve(std::size_t batch, std::size_t in) override;
  std::size_t workspace_bytes(std::size_t max_batch) const override;
  void forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>& saved) override;
  void backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>& saved) override;
  bool backward_reads_output() const override { return false; }

  // Samples per im2col chunk for a micro-batch of `batch`: as many as keep
  // the unfolded patches within the workspace limit (at least one sample).
  std::size_t chunk_samples(std::size_t batch) const;
  // Values the workspace may hold per chunk (default: default_workspace_limit);
  // set before reserve().
  void set_workspace_limit(std::size_t values) { workspace_limit_ = values; }

  std::size_t in_channels() const { return in_; }
  std::size_t out_channels() const { return out_; }
  std::size_t groups() const { return groups_; }
  std::size_t patch() const { return in_ / groups_ * win_.kh * win_.kw; }  // per group
  std::size_t positions() const { return oh_ * ow_; }  // after set_input_shape
  static const std::size_t default_workspace_limit;

  // Samples [first, first + n) of x unfolded into the workspace's col, and
  // col folded back into those samples of dx. (Public: nvcc refuses
  // extended lambdas in private or protected member functions.)
  void im2col(Context& ctx, ConstMatrix<T> x, std::size_t first, std::size_t n) const;
  void col2im(Context& ctx, Matrix<T> dx, std::size_t first, std::size_t n) const;

 private:
  std::size_t in_, out_, groups_;
  Window2d win_;
  bool bias_;
  std::size_t workspace_limit_ = default_workspace_limit;
  std::size_t h_ = 0, w_ = 0, oh_ = 0, ow_ = 0;  // set_input_shape
  Vector<T> weight_, dweight_, b_, db_;
  VectorBuffer<T> col_, yt_;  // workspace: (chunk P, C K) and (chunk P, O)

  std::size_t weights() const { return out_ * patch(); }
};

}  // namespace strata
