// A device mesh: the world's ranks arranged as data x pipeline x tensor
// groups (Megatron's layout: tensor-parallel ranks are neighbours, so on a
// node they share memory; data-parallel replicas are furthest apart).
//
//   world rank w = (d * pp + p) * tp + t
//
// Rank w belongs to one data-parallel group (same p and t: the replicas of one
// shard of the model), one pipeline (same d and t: the stages 0..pp-1) and one
// tensor-parallel group (same d and p: the shards of one stage's layers).
#pragma once

#include "backends/comm/communicator.hpp"

#include <memory>
#include <string>

namespace strata {

struct MeshShape {
  int dp = 1, pp = 1, tp = 1;
  int size() const { return dp * pp * tp; }
  std::string str() const;  // "dp 2 x pp 2 x tp 1"
};

// Throws config when a factor is not positive or the product differs from
// the world size, naming every factor.
void validate_mesh(const MeshShape& shape, int world_size);

class Mesh {
 public:
  // Collective over world (every rank calls it with the same shape).
  Mesh(comm::Communicator& world, const MeshShape& shape);
  Mesh(const Mesh&) = delete;
  Mesh& operator=(const Mesh&) = delete;

  const MeshShape& shape() const { return shape_; }
  comm::Communicator& world() { return world_; }
  comm::Communicator& dp() { return *dp_; }
  comm::Communicator& pp() { return *pp_; }
  comm::Communicator& tp() { return *tp_; }
  int dp_rank() const { return d_; }
  int pp_rank() const { return p_; }
  int tp_rank() const { return t_; }

 private:
  // A group of `size` ranks: the world itself, a one-rank communicator, or a
  // split of the world.
  comm::Communicator* group(int size, int color, int key, std::unique_ptr<comm::Communicator>& own);

  comm::Communicator& world_;
  MeshShape shape_;
  int d_ = 0, p_ = 0, t_ = 0;
  std::unique_ptr<comm::Communicator> own_dp_, own_pp_, own_tp_;
  comm::Communicator *dp_ = nullptr, *pp_ = nullptr, *tp_ = nullptr;
};

}  // namespace strata
