// Linear layer: y = x W^T + b, with W (out, in) and b (out) as in PyTorch.
// Applies to the last dimension of the input shape ({in} -> {out},
// {T, in} -> {T, out}): a batch of B samples of P positions is a GEMM over
// B * P rows.
//
// Parameters in the flat buffer: W row-major (out * in values), then b (out).
// forward:  y(batch, out) = x(batch, in) W^T            GEMM (N, T), then bias pass
// backward: dW += dy^T x; db += column sums of dy       GEMM (T, N), reduction
//           dx  = dy W                                  GEMM (N, N), skipped when dx is empty
// With set_inner_chunk (--reproducible --tp-chunk) the forward and input-
// gradient GEMMs sum their inner dimension in chunks, exactly
// (gemm_exact_chunks), so that a split of it over ranks gives the same bits.
#pragma once

#include "layers/capabilities.hpp"

#include <string>
#include <vector>

namespace strata {

template <class T>
class Linear final : public Layer<T>,
                     public ExactSums,
                     public TensorShardable,
                     public TiedWeight<T> {
 public:
  // std > 0: weights drawn from N(0, std^2) and zero biases (GPT-2's
  // initialisation, `std` in a model file) instead of the model's scheme.
  Linear(std::size_t in, std::size_t out, bool bias = true, double std = 0);
  // A Linear whose weight is the (out, in) weight of the layer named `tie`
  // (Layer::tied_to; `tie` in a model file): GPT's language-model head
  // tied to the token embedding (vocab, dim).
  Linear(std::size_t in, std::size_t out, bool bias, double std, std::string tie);

  // The layer a model file describes (layers/registry.hpp).
  static LayerPtr<T> from_args(LayerArgs& args, const Shape& in, LayerBuild& build);

  std::string reproducibility_issue() const override { return ""; }
  std::string name() const override;
  Shape output_shape(const Shape& in) const override;
  // weight (out, in) unless tied, then bias (out) if any.
  std::vector<ParamSpec> params() const override;
  void add_costs(std::vector<LayerCost>& out) const override;
  void bind(Vector<T> params, Vector<T> grads) override;
  std::string tied_to() const override { return tie_; }
  void tie_weight(const Shape& shape) override;
  void untie_weight() override { tied_ = false; }
  void bind_tied(Vector<T> weight, Vector<T> grad) override;
  void forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>& saved) override;
  void backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>& saved) override;
  bool backward_reads_output() const override { return false; }
  TensorSplit tensor_split() const override {
    return tie_.empty() ? TensorSplit::linear : TensorSplit::none;
  }
  // Exact inner sums (Layer::set_inner_chunk) in forward and for the input
  // gradient, in chunks of s (the last one shorter when s does not divide
  // the width: as a padded vocabulary's last rank sums it).
  void set_inner_chunk(std::size_t s) override;
  bool exact_forward() const { return inner_chunk_ > 0; }
  bool exact_input_grad() const { return inner_chunk_ > 0; }
  // The exact pairs (two doubles per value, hi then lo, row-major) of x W^T,
  // or with input_grad of dy W, before they are rounded: a tensor-parallel
  // layer adds its group's pairs first (detail::round_exact then gives the
  // values). The product must be exact (exact_forward, exact_input_grad).
  // The pairs live in the layer until its next call.
  Kokkos::View<double*, MemSpace> exact_product(Context& ctx, ConstMatrix<T> a, bool input_grad);

  std::size_t in() const { return in_; }
  std::size_t out() const { return out_; }
  bool has_bias() const { return bias_; }
  double init_std() const { return std_; }
  bool weight_tied() const { return tied_; }  // tie_weight was called (and not undone)
  ConstMatrix<T> weight() const { return weight_; }
  ConstVector<T> bias() const { return b_; }

 private:
  std::size_t in_, out_;
  bool bias_;
  double std_;
  std::string tie_;     // tied_to()
  bool tied_ = false;   // the weight is another layer's (tie_weight was called)
  Matrix<T> weight_, dweight_;  // (out, in)
  Vector<T> b_, db_;            // (out)
  std::size_t inner_chunk_ = 0;              // set_inner_chunk
  Kokkos::View<double*, MemSpace> pairs_;    // exact_product's scratch
};

namespace detail {
// y(i, j) += b(j)
template <class T>
void add_bias(Context& ctx, Matrix<T> y, ConstVector<T> b);
// y = the values of exact pairs (exact_product's layout, y's rows x
// columns; y contiguous).
template <class T>
void round_exact(Context& ctx, Kokkos::View<const double*, MemSpace> pairs, Matrix<T> y);
}  // namespace detail

}  // namespace strata
