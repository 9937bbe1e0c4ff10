// Losses: fused softmax cross-entropy over integer labels, and mean squared
// error. Each computes the loss and its gradient with respect to the model
// output in one pass.
//
// out: (batch, width) model output, device memory.
// Targets: labels for cross-entropy, one per row (batch) or one per position
// (batch x P: the output row holds P positions of width / P classes, e.g. a
// language model's tokens; the loss of a sample is the MEAN over its P
// positions, so that the mean over the batch is PyTorch's
// cross_entropy(logits.view(-1, classes), targets.view(-1))), values (batch,
// width) for MSE. A negative label (PyTorch's ignore_index, -100) is ignored:
// its position adds nothing to the loss or the gradient but still counts in
// the P of the mean (PyTorch divides by the labels that count in the whole
// batch instead; the two agree when no label is ignored), so that a sample's
// weight does not depend on the other samples of a data-parallel batch.
// Return value: the SUM over the batch of the per-sample losses, exact
// (backends/exact_sum.hpp: the same bits however the batch is split over
// ranks, micro-batches and threads); the caller divides by the global batch.
// dout: gradient of (scale * sum) with respect to out; scale is 1 / global batch
// for a mean loss. dout may be empty (evaluation).
#pragma once

#include "backends/context.hpp"
#include "backends/exact_sum.hpp"

#include <memory>
#include <string>

namespace strata {

template <class T>
struct Targets {
  Labels labels;          // classification
  ConstMatrix<T> values;  // regression
};

enum class LossKind { cross_entropy, mse };
LossKind parse_loss(const std::string& name);  // throws config
const char* to_string(LossKind kind);

template <class T>
class Loss {
 public:
  virtual ~Loss() = default;
  virtual std::string name() const = 0;
  virtual LossKind kind() const = 0;
  // Throws config naming the loss and both shapes when targets do not fit out.
  virtual void check(std::size_t batch, std::size_t width, const Targets<T>& t) const = 0;
  virtual ExactSum forward_backward(Context& ctx, ConstMatrix<T> out, const Targets<T>& t,
                                  Matrix<T> dout, T scale) = 0;
  // Labels whose class holds the largest output (count_correct below; a
  // loss over outputs split across ranks says it for the whole output).
  virtual std::size_t count_correct(Context& ctx, ConstMatrix<T> out, Labels labels);
};

// Per-sample loss: log(sum_j exp(z_j)) - z_label, computed stably (max shift).
// Gradient: (softmax(z) - onehot(label)) * scale.
template <class T>
class SoftmaxCrossEntropy final : public Loss<T> {
 public:
  std::string name() const override { return "softmax cross-entropy"; }
  LossKind kind() const override { return LossKind::cross_entropy; }
  void check(std::size_t batch, std::size_t width, const Targets<T>& t) const override;
  ExactSum forward_backward(Context& ctx, ConstMatrix<T> out, const Targets<T>& t,
                            Matrix<T> dout, T scale) override;
};

// Per-sample loss: mean over the width of (out - target)^2, so that the mean
// over the batch equals PyTorch's MSELoss(reduction='mean').
// Gradient: 2 (out - target) / width * scale.
template <class T>
class MeanSquaredError final : public Loss<T> {
 public:
  std::string name() const override { return "MSE loss"; }
  LossKind kind() const override { return LossKind::mse; }
  void check(std::size_t batch, std::size_t width, const Targets<T>& t) const override;
  ExactSum forward_backward(Context& ctx, ConstMatrix<T> out, const Targets<T>& t,
                            Matrix<T> dout, T scale) override;
};

template <class T>
std::unique_ptr<Loss<T>> make_loss(LossKind kind);

// Number of labels (one per row, or per position as for the loss) whose
// position holds the largest output (ties go to the first index); ignored
// (negative) labels are never correct.
template <class T>
std::size_t count_correct(Context& ctx, ConstMatrix<T> out, Labels labels);

}  // namespace strata
