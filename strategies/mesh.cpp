#include "strategies/mesh.hpp"

#include "backends/comm/self.hpp"
#include "backends/error.hpp"

namespace strata {

std::string MeshShape::str() const {
  return "dp " + std::to_string(dp) + " x pp " + std::to_string(pp) + " x tp " +
         std::to_string(tp);
}

void validate_mesh(const MeshShape& s, int world_size) {
  STRATA_REQUIRE(s.dp > 0 && s.pp > 0 && s.tp > 0, config, "mesh ", s.str(),
                 ": every factor (--dp, --pp, --tp) must be positive");
  STRATA_REQUIRE(s.size() == world_size, config, "mesh ", s.str(), " has ", s.size(),
                 " ranks but the world has ", world_size,
                 " (--dp x --pp x --tp must equal the number of ranks)");
}

Mesh::Mesh(comm::Communicator& world, const MeshShape& shape) : world_(world), shape_(shape) {
  validate_mesh(shape, world.size());
  const int w = world.rank();
  t_ = w % shape.tp;
  p_ = (w / shape.tp) % shape.pp;
  d_ = w / (shape.tp * shape.pp);
  // Every rank takes part in each split, in the same order.
  tp_ = group(shape.tp, d_ * shape.pp + p_, t_, own_tp_);
  pp_ = group(shape.pp, d_ * shape.tp + t_, p_, own_pp_);
  dp_ = group(shape.dp, p_ * shape.tp + t_, d_, own_dp_);
}

comm::Communicator* Mesh::group(int size, int color, int key,
                                std::unique_ptr<comm::Communicator>& own) {
  if (size == world_.size()) return &world_;
  if (size == 1) {
    own = std::make_unique<comm::SelfComm>(world_.options());
    return own.get();
  }
  own = world_.split(color, key);
  STRATA_REQUIRE(own && own->size() == size, runtime, "mesh ", shape_.str(), ": a split of the ",
                 world_.name(), " communicator gave ", own ? own->size() : 0, " ranks, expected ",
                 size);
  return own.get();
}

}  // namespace strata
