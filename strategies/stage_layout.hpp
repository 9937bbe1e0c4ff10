// A pipeline stage's values and the whole model's single-rank layout:
// stages concatenated in order, tensor shards assembled, the copy of a tied
// weight left out (its original is in the layout), ZeRO shards joined.
// Parameters, optimizer state, buffers and checkpoints of any mesh pass
// through it, so that any mesh resumes any other's checkpoint
// (docs/design-notes.md, "state in single-rank layout").
#pragma once

#include "layers/sequential.hpp"
#include "strategies/mesh.hpp"
#include "strategies/shard_map.hpp"
#include "strategies/stage_ties.hpp"

#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace strata {

template <class T>
class StageLayout {
 public:
  // stage: pipeline rank p's layers [bounds[p], bounds[p + 1]) of the whole
  // model, whose layers have full_sizes single-rank parameters each; shards:
  // how optimizer state and master weights are sharded over dp (nullptr: not).
  StageLayout(Mesh& mesh, Sequential<T>& stage, const StageTies<T>& ties,
              std::vector<std::size_t> bounds, std::vector<std::size_t> full_sizes,
              const ShardMap* shards);

  // The whole model in single-rank layout from every stage's values (stage
  // layout, host; collective over the world).
  std::vector<T> gather(const std::vector<T>& stage_values);
  // This stage's values (stage layout) from the whole model's.
  std::vector<T> scatter(const std::vector<T>& full) const;
  // A buffer laid out like the optimizer state (sharded: this rank's shard)
  // in stage layout (shards gathered over dp), and back.
  std::vector<T> stage_state(Vector<T> state);
  void set_stage_state(Vector<T> state, const std::vector<T>& stage_values) const;

  // The stage values [lo, hi) that this rank alone writes in a sharded
  // checkpoint, as pairs (stage index, single-rank index) in order: a tensor
  // shard's own values, a value replicated over the tensor group on tensor
  // rank 0 only, a tied weight's copy never.
  std::vector<std::pair<std::size_t, std::size_t>> written(std::size_t lo, std::size_t hi) const;

  // Every buffer of the whole model (names and sizes of model_buffers), each
  // read from a stage that holds it (collective over the world); and back.
  std::map<std::string, std::vector<double>> gather_buffers(const std::vector<BufferInfo>& model_buffers);
  void scatter_buffers(const std::map<std::string, std::vector<double>>& values);

  std::size_t full_num_params() const;

 private:
  Mesh& mesh_;
  Sequential<T>& stage_;
  const StageTies<T>& ties_;
  std::vector<std::size_t> bounds_, full_sizes_;
  const ShardMap* shards_;
};

}  // namespace strata
