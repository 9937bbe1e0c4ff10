// Tied weights across pipeline stages (a GPT's head on the last stage, its
// token embedding on the first): the copy stage holds a copy of the weight,
// as Megatron-LM does. After init (and restore) the source stage sends the
// weight; after every backward the two stages add each other's gradient
// before the data-parallel sum, so both update identically. Ties whose two
// layers share a stage are Sequential's business (layers/sequential.hpp).
#pragma once

#include "layers/sequential.hpp"
#include "strategies/mesh.hpp"
#include "strategies/tensor_parallel.hpp"

#include <cstddef>
#include <vector>

namespace strata {

struct CrossTie {
  std::size_t source, copy;   // layers of the whole model
  std::size_t size;           // values of the weight
  std::size_t weight_offset;  // of the weight in the source layer's slice
  std::size_t full_offset;    // of the weight in the single-rank layout
  int source_stage, copy_stage;
  std::size_t mapped = 0;     // the first values, that are in the single-rank layout (the rest: padding)
};

// The ties of the whole model (`all`, cut at `bounds`: stage s holds layers
// [bounds[s], bounds[s + 1])) whose two layers fall on different stages.
// full_sizes: every layer's single-rank parameter count; tp_rank: this
// rank's tensor shard (a vocabulary shard of an embedding is one block of
// rows of the weight).
template <class T>
std::vector<CrossTie> find_cross_ties(const TensorParallelLayers<T>& all,
                                      const std::vector<std::size_t>& bounds,
                                      const std::vector<std::size_t>& full_sizes, int tp_rank);

template <class T>
class StageTies {
 public:
  // stage: this rank's stage of the pipeline (layers [bounds[p], bounds[p + 1])).
  StageTies(Context& ctx, Mesh& mesh, Sequential<T>& stage, std::vector<std::size_t> bounds,
            std::vector<CrossTie> ties);

  // The tie whose copy is local layer `l` of this stage (nullptr: none); its
  // weight leads the layer's slice and is not part of the single-rank layout.
  const CrossTie* copy_at(std::size_t l) const;
  // Whether gradients of local layers up to held() wait for sum_gradients
  // (a tied layer on this stage): the data-parallel buckets of those layers
  // must not start before.
  bool holds_gradients() const { return holds_; }
  std::size_t held() const { return held_; }
  // The stage's local layers that are a source or a copy of a tie.
  std::vector<std::size_t> layers() const;

  // The source stage sends each weight to its copy (collective over the pipeline).
  void share_weights();
  // Both stages of each tie add each other's gradient (exact twins under
  // --reproducible): the same two terms on both, so the sums are bitwise equal.
  void sum_gradients();
  // Largest difference between a tied weight and its copy (0 without ties;
  // collective over the world).
  double copy_deviation();

 private:
  // This stage's slice of tie t's weight in a flat buffer of the stage layout.
  std::size_t offset(const CrossTie& t) const;

  Context& ctx_;
  Mesh& mesh_;
  Sequential<T>& stage_;
  std::vector<std::size_t> bounds_;
  std::vector<CrossTie> ties_;
  bool holds_ = false;
  std::size_t held_ = 0;
  VectorBuffer<T> buffer_;                 // the other stage's gradient of a tied weight
  Kokkos::View<double*, MemSpace> exact_;  // its exact twin (--reproducible)
};

}  // namespace strata
