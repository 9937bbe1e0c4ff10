// Generation with a KV cache: a language model run one position at a time.
//
//   Decoder<float> dec(model, model.shape(0)[0]);   // a built Sequential
//   for (int t : prompt) logits = dec.step(ctx, t); // (1, vocab) after each
//   ... sample the next token from logits, dec.step(ctx, next), ...
//
// Each step runs every layer on the new position's row alone
// (Layer::decode): attention keeps the keys and values of the positions
// before (its cache) and attends over them, so a step costs one position's
// work, not a forward of the whole sequence. The logits of step p equal
// position p's of a full forward of the sequence so far, up to rounding
// (tested). The model must start with a layer that takes one token id per
// position (an Embedding) and keep {T, ...} shapes after it.
#pragma once

#include "layers/sequential.hpp"

#include <vector>

namespace strata {

template <class T>
class Decoder {
 public:
  // max_positions: the longest sequence (prompt and generated tokens) this
  // decoder runs before reset(); at most the model's input length T.
  Decoder(Sequential<T>& model, std::size_t max_positions);

  // Forgets every position (the caches are zeroed): the next step is position 0.
  void reset(Context& ctx);
  // Feeds `token` at the next position; returns the model's output row there
  // (device memory, valid until the next step). Throws config when the
  // positions are used up.
  ConstMatrix<T> step(Context& ctx, int token);
  std::size_t position() const { return position_; }
  std::size_t max_positions() const { return max_positions_; }

 private:
  Sequential<T>& model_;
  std::size_t max_positions_, position_ = 0;
  std::vector<Saved<T>> states_;     // one per top-level layer
  VectorBuffer<T> memory_;           // their scratch (Layer::decode_size)
  std::vector<MatrixBuffer<T>> rows_;  // rows_[i]: the output row of layer i; rows_.back(): the logits
  MatrixBuffer<T> token_;            // (1, 1): the id as a float
};

}  // namespace strata
