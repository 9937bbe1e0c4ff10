// Dropout with a counter-based mask: element (row r, column j) of call c keeps
// its value with probability 1 - p, scaled by 1 / (1 - p); the random number
// is indexed by the row's position in the global batch (set_row_offset), so
// data-parallel shards drop what single-rank training would. The mask is a pure function of
// (seed, c, i), identical on every backend, and recomputed in backward instead
// of stored. In evaluation mode the layer is the identity.
#pragma once

#include "layers/layer.hpp"

namespace strata {

template <class T>
class Dropout final : public Layer<T> {
 public:
  // p in [0, 1): probability of dropping an element.
  Dropout(double p, std::uint64_t seed);

  std::string name() const override;
  std::size_t out_features(std::size_t in) const override { return in; }
  void forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y) override;
  void backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx) override;

  void set_row_offset(std::size_t offset) override { row_offset_ = offset; }

  // Number of training forward calls so far (checkpointed for exact resume).
  std::uint64_t calls() const { return calls_; }
  void set_calls(std::uint64_t calls) { calls_ = calls; }

 private:
  double p_;
  std::uint64_t seed_;
  std::uint64_t calls_ = 0;
  std::size_t row_offset_ = 0;
  bool last_was_training_ = false;
};

}  // namespace strata
