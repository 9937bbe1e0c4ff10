// Generated samples of a model's shapes, for timing and smoke runs:
// strata-train --dataset synthetic, the planner's measured steps
// (planner/calibrate.hpp) and the benchmarks.
//
//   data::Dataset d = synthetic_data(model, LossKind::cross_entropy, 1024, 42);
//
// A model that embeds token ids and predicts one of them per position gets
// token windows (data::make_synthetic_tokens, ids below the smaller of its
// vocabulary and its output per position); any other model features of
// its input (with its input's shape, an image model's {C, H, W}) and labels
// in [0, outputs) for cross-entropy, targets of its output width for the
// regression losses (data::make_synthetic). The same seed gives the same
// samples on every machine.
#pragma once

#include "data/dataset.hpp"
#include "layers/loss.hpp"
#include "layers/sequential.hpp"

#include <cstddef>
#include <cstdint>

namespace strata {

data::Dataset synthetic_data(const Sequential<float>& model, LossKind loss, std::size_t samples,
                             std::uint64_t seed);

}  // namespace strata
