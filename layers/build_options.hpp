// What a model is built for: the batch it takes, the micro-batches in flight,
// the padding of its flat buffers, and the numerics policy (how it stores activations and how exactly it sums). Everything a
// model must know before it allocates is here, handed to Sequential::build
// at once, so no setter has a "before build()" rule:
//
//   BuildOptions b;
//   b.max_batch = 128;
//   b.numerics.storage = Precision::bf16;   // --precision bf16
//   b.numerics.exact_chunk = 8;             // --reproducible --chunk 8
//   model.build(b);
#pragma once

#include "backends/error.hpp"
#include "backends/precision.hpp"

#include <cstddef>
#include <vector>

namespace strata {

// The numerics policy of a model.
//   storage      precision of the activations kept between layers (float
//                models only): fp32 (default), bf16 or fp16 rounds every layer
//                output and every gradient passed between layers to it
//   emulated     16-bit values kept in float buffers (the bitwise reference of
//                the real 16-bit storage; more memory)
//   exact_chunk  --reproducible: parameter gradients summed exactly over
//                chunks of this many samples (layers/batch_sums.hpp); 0: off
//   inner_chunk  --tp-chunk: the sums tensor parallelism splits too, in
//                chunks of that many values (needs exact_chunk); 0: off
struct Numerics {
  Precision storage = Precision::fp32;
  bool emulated = false;
  std::size_t exact_chunk = 0;
  std::size_t inner_chunk = 0;

  bool exact() const { return exact_chunk > 0; }
  // Whether activations are kept in 16-bit buffers.
  bool storage16() const { return storage != Precision::fp32 && !emulated; }
  // Throws config naming the contradiction: an inner chunk without exact
  // sums, 16-bit storage or exact sums of a double model.
  void check(bool float_model) const {
    STRATA_REQUIRE(inner_chunk == 0 || exact(), config, "--tp-chunk applies to --reproducible runs");
    STRATA_REQUIRE(storage == Precision::fp32 || float_model, config, to_string(storage),
                   " storage needs a float model");
    STRATA_REQUIRE(!exact() || float_model, config, "--reproducible trains float models");
  }
};

// A run of parameter pieces [first_piece, last_piece) (layers/param_pieces.hpp:
// the leaf layers holding parameters, so a unit may end inside a block) whose
// parameters (or gradients) live in buffer `buffer` (from its start, padded
// with zeros to a multiple of BuildOptions::pad_multiple). Units sharing a
// buffer take turns in it:
// ZeRO-2 keeps a unit's gradients only until they are reduce-scattered
// (strategies/gradient_reduce_scatter.hpp), ZeRO-3 its parameters only while
// its layers run (strategies/parameter_gather.hpp).
struct BufferUnit {
  std::size_t first_piece = 0, last_piece = 0;
  std::size_t buffer = 0;
};

struct BuildOptions {
  std::size_t max_batch = 1;     // rows of the largest forward
  std::size_t slots = 1;         // micro-batches in flight (pipeline schedules)
  std::size_t pad_multiple = 1;  // buffers padded to a multiple (sharded optimizers)
  Numerics numerics;
  // An activation right after a layer that can apply it (FusedActivation,
  // layers/capabilities.hpp: BatchNorm and ReLU) runs inside that layer's
  // kernels, with the same bits; fp32 storage only (16-bit storage rounds
  // the output the activation's derivative reads). false: every layer apart
  // (the reference the tests compare with).
  bool fuse_activations = true;
  // Empty: one flat gradient buffer. Else units covering every piece in
  // order, and the gradients in their buffers (not with exact sums, whose
  // twin follows the flat buffer).
  std::vector<BufferUnit> grad_units;
  // The same for the parameters (empty: one flat parameter buffer).
  std::vector<BufferUnit> param_units;
};

}  // namespace strata
