// One layer alone on a batch of seeded values: the buffers its forward and
// backward take (token ids below the vocabulary for an embedding), as
// `strata-plan calibrate --model` (planner/calibrate.hpp) and
// strata-bench-train's per-layer breakdown time it. Host values, copied to
// the layer's memory.
#pragma once

#include "layers/layer.hpp"
#include "layers/saved.hpp"

#include <cstddef>

namespace strata::planner {

struct LayerProbe {
  MatrixBuffer<float> x, y, dy, dx;
  VectorBuffer<float> scratch;
  Saved<float> saved;  // x, y and scratch set: ready for forward

  // For `layer` (its input shape set) on `batch` rows; `salt` varies the values.
  LayerProbe(const Layer<float>& layer, std::size_t batch, unsigned salt);
};

// Deterministic values in [-0.5, 0.5) on the host.
void fill_seeded(float* p, std::size_t n, unsigned salt);

}  // namespace strata::planner
