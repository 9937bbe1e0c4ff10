// The single-rank strategy: forward, loss, backward and optimizer step on one
// execution space, with no communication at all. Every parallel strategy is
// tested against it.
#pragma once

#include "data/loader.hpp"
#include "layers/loss.hpp"
#include "layers/optimizer.hpp"
#include "layers/sequential.hpp"

namespace strata {

template <class T>
class Local {
 public:
  Local(Context& ctx, Sequential<T>& model, Loss<T>& loss, Optimizer<T>& optimizer);

  // One training step on a batch; returns the mean loss over the batch.
  double step(const data::Batch<T>& batch);

 private:
  Context& ctx_;
  Sequential<T>& model_;
  Loss<T>& loss_;
  Optimizer<T>& optimizer_;
};

struct Evaluation {
  double loss = 0;      // mean over the samples
  double accuracy = 0;  // classification only
  std::size_t samples = 0;
};

// Evaluates the model (in evaluation mode) over a whole data set.
template <class T>
Evaluation evaluate(Context& ctx, Sequential<T>& model, Loss<T>& loss, const data::Dataset& d,
                    std::size_t batch);

}  // namespace strata
