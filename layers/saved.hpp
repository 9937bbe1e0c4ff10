// The per-micro-batch context: what a layer's forward keeps for the backward
// of the same micro-batch. The caller (Sequential, a Block for its inner
// layers) owns one per layer and micro-batch in flight, fills the first part
// before forward and hands the same object to backward; layers keep no
// per-micro-batch state of their own, so a pipeline with several
// micro-batches in flight needs nothing from them.
//
//   Saved<float> s;  s.x = x;  s.y = y;  s.row_offset = first_row;  s.scratch = ...;
//   layer.forward(ctx, x, y, s);
//   ...                                  // other micro-batches, other Saved
//   layer.backward(ctx, dy, dx, s);
#pragma once

#include "backends/kokkos.hpp"

#include <cstdint>
#include <vector>

namespace strata {

template <class T>
struct Saved {
  // Set by the caller before forward.
  ConstMatrix<T> x;             // the layer's input: unchanged until backward
  ConstMatrix<T> y;             // its output: the values forward wrote (restored
                                // from 16-bit storage before backward if it reads them)
  std::size_t row_offset = 0;   // the micro-batch's first row in the global batch
  bool training = true;         // the model's mode at this forward
  bool recomputing = false;     // forward runs again inside backward (a recomputing
                                // block): state updates (running statistics) are skipped
  Vector<T> scratch;            // Layer::saved_size(rows) values of the caller's
                                // memory, the layer's alone until its backward
  // Written by the layer's forward.
  std::uint64_t counter = 0;    // a scalar the layer keeps (Dropout: its pass)
  std::vector<Saved> inner;     // blocks: one per inner layer
};

}  // namespace strata
