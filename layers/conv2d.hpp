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
// On a device the workspace is large, for wide GEMMs. On host threads whose
// BLAS runs sequentially inside a kernel (Blas::sequential_in_kernels:
// OpenBLAS built with OpenMP or sequential), each thread instead takes whole
// blocks of samples and runs the same steps one sample at a time (col(C K,
// P) stays in the core's cache, y(b) = W col is already NCHW, no layout
// copies), with the weight gradients of the blocks added in block order;
// there are at most max_sample_blocks blocks, a function of the batch alone,
// so the result does not depend on the thread count (docs/design-notes.md
// has the measurements). Otherwise (the portable GEMM, another BLAS) the host
// runs chunks of 2^20 values, sized to stay in the last-level cache.
#pragma once

#include "layers/capabilities.hpp"
#include "layers/window2d.hpp"

#include <vector>

namespace strata {

// How a host Conv2d runs (a device always runs chunks).
enum class ConvAlgorithm {
  automatic,  // samples where the BLAS allows it, else chunks
  chunks,     // im2col over chunks of samples, threaded GEMMs
  samples,    // blocks of samples per thread, sequential GEMMs (when allowed)
};

// The default of every Conv2d: $STRATA_CONV_ALGORITHM (auto, chunks or
// samples; for benchmarks and checks), else automatic.
ConvAlgorithm default_conv_algorithm();

template <class T>
class Conv2d final : public Layer<T>, public ExactSums {
 public:
  Conv2d(std::size_t in_channels, std::size_t out_channels, const Window2d& window,
         std::size_t groups = 1, bool bias = true);

  // The layer a model file describes (layers/registry.hpp): out (channels),
  // kernel, stride, padding, dilation, groups, bias.
  static LayerPtr<T> from_args(LayerArgs& args, const Shape& in, LayerBuild& build);

  std::string name() const override;
  std::string reproducibility_issue() const override { return ""; }
  Shape output_shape(const Shape& in) const override;
  void set_input_shape(const Shape& in) override;
  // weight (out, in / groups, kh, kw) by the model's scheme with PyTorch's
  // fans, then bias (out) if any.
  std::vector<ParamSpec> params() const override;
  // The GEMM of each group: (positions x patch) times (patch x out / groups).
  void add_costs(std::vector<LayerCost>& out) const override;
  void bind(Vector<T> params, Vector<T> grads) override;
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

  // Default automatic; set before reserve().
  void set_algorithm(ConvAlgorithm a) { algorithm_ = a; }
  static constexpr std::size_t max_sample_blocks = 32;
  // Blocks of samples of the samples algorithm for a micro-batch of `batch`.
  static std::size_t sample_blocks(std::size_t batch);
  // Whether forward/backward on ctx run the samples algorithm (after reserve).
  bool runs_samples(const Context& ctx, std::size_t batch) const;

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
  // The samples algorithm (see the top of this file).
  void forward_samples(Context& ctx, ConstMatrix<T> x, Matrix<T> y);
  void backward_samples(Context& ctx, ConstMatrix<T> x, ConstMatrix<T> dy, Matrix<T> dx);

 private:
  std::size_t in_, out_, groups_;
  Window2d win_;
  bool bias_;
  std::size_t workspace_limit_ = default_workspace_limit;
  ConvAlgorithm algorithm_ = default_conv_algorithm();
  std::size_t h_ = 0, w_ = 0, oh_ = 0, ow_ = 0;  // set_input_shape
  Vector<T> weight_, dweight_, b_, db_;
  // Workspace: col (chunk P, C K), or a (C K, P) per block; yt (chunk P, O);
  // the blocks' weight gradients.
  VectorBuffer<T> col_, yt_, parts_;

  std::size_t weights() const { return out_ * patch(); }
  std::size_t patch_rows() const { return in_ * win_.kh * win_.kw; }  // C K
  bool samples_possible() const;
  struct Workspace {
    std::size_t col, yt, parts;  // values of each buffer
  };
  Workspace workspace(std::size_t batch) const;  // what reserve(batch) allocates
};

}  // namespace strata
