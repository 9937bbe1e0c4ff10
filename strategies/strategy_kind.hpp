// The strategies a run can ask for by name (strata-train's --strategy), and
// the rules that tie a strategy to its mesh: which factors it fixes, which
// it leaves to the others, and which combinations contradict it. The apps
// parse the name once, at the command line, and ask these functions; no app
// compares strategy names.
#pragma once

#include "strategies/mesh.hpp"

#include <string>

namespace strata {

enum class StrategyKind {
  automatic,  // "auto": data parallelism, or the mesh when a factor is given
  local,      // one rank, no communication
  dp,         // data parallelism only
  pipeline,   // pipeline stages (every rank a stage unless --dp/--pp say otherwise)
  tensor,     // tensor parallelism (every rank a shard unless --dp/--tp say otherwise)
  hybrid,     // the mesh the factors give (--dp x --pp x --tp, ZeRO)
  plan,       // the layout the planner ranks first (strategies become hybrid)
};

// "auto", "local", ...: throws config naming the unknown name and the known ones.
StrategyKind parse_strategy(const std::string& name);
const char* to_string(StrategyKind kind);

// The mesh factors a run gives (0: not given).
struct MeshFactors {
  int dp = 0, pp = 0, tp = 0;
  int zero = 0;
};

// Whether the strategy itself needs the model-parallel engine (a mesh).
bool needs_mesh(StrategyKind kind);
// Throws config when the factors contradict the strategy (local with a
// mesh, dp with stages or shards, pipeline with shards, tensor with stages),
// naming the strategy that would allow them.
void check_factors(StrategyKind kind, const MeshFactors& f);
// The mesh on `world` ranks: the factors given, the strategy's default for
// the others (pipeline: every rank a stage, tensor: every rank a shard,
// unless --dp is given), and the data-parallel factor last. Throws config
// when pp x tp does not divide the world.
MeshShape mesh_for(StrategyKind kind, const MeshFactors& f, int world);

}  // namespace strata
