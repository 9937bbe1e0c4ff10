// ZeRO-3's parameters: each rank stores its shard of the stage's parameters
// only (strategies/shard_map.hpp). A unit's parameters are all-gathered into
// its buffer just before its first piece runs (layers/param_pieces.hpp), in
// forward, in a recomputing block's second forward and in backward;
// meanwhile the unit the pass needs next (from the model's piece_calls, the
// same on every rank) is already under way in the other buffer, and a
// buffer is reused by a later unit once its own layers are done. Units
// alone in their buffer (pinned: a tied weight that a later layer uses, or a
// pipeline's tied copy) stay gathered, and are gathered again whenever the
// shard changes.
//
//   ParameterGather<float> g(ctx, group, stage, map, shard);  // stage built with param units
//   stage.set_piece_hooks({[&](std::size_t p, Pass pass) { g.before_piece(p, pass); }, {}});
//   ... forward and backward gather as they go ...
//   optimizer updates the shard; g.shard_changed();
#pragma once

#include "backends/comm/communicator.hpp"
#include "backends/context.hpp"
#include "layers/sequential.hpp"
#include "strategies/shard_map.hpp"

#include <vector>

namespace strata {

template <class T>
class ParameterGather {
 public:
  // model: built with parameter units, the units of `map`; shard: this
  // rank's values in shard order (outlives this object).
  ParameterGather(Context& ctx, comm::Communicator& group, Sequential<T>& model,
                  const ShardMap& map, Vector<T> shard);

  // Before piece p runs in `pass`: its unit is gathered (waits for it), the
  // next one the pass needs started.
  void before_piece(std::size_t p, Pass pass);
  // The shard changed (an optimizer step, a checkpoint): the units taking
  // turns are stale; the pinned ones are gathered again (collective).
  void shard_changed();
  bool pinned(std::size_t u) const;

 private:
  void start(std::size_t u);   // its gather launched into its buffer
  void ensure(std::size_t u);  // its values complete in its buffer

  Context& ctx_;
  comm::Communicator& group_;
  Sequential<T>& model_;
  const ShardMap& map_;
  Vector<T> shard_;
  std::vector<std::size_t> unit_of_piece_;
  std::vector<bool> pinned_;  // alone in its buffer
  // Per pass and piece: the unit the pass needs after this piece's (taking
  // turns in buffers; SIZE_MAX: none).
  std::vector<std::size_t> next_[3];
  // Per buffer: the unit it holds or receives (SIZE_MAX: none) and the
  // gather in flight.
  std::vector<std::size_t> resident_;
  std::vector<comm::Handle> pending_;
  std::vector<bool> in_flight_;
};

}  // namespace strata
