#include "strategies/strategy_kind.hpp"

#include "backends/error.hpp"

#include <array>

namespace strata {

namespace {
constexpr std::array<StrategyKind, 7> kinds{StrategyKind::automatic, StrategyKind::local,
                                            StrategyKind::dp,        StrategyKind::pipeline,
                                            StrategyKind::tensor,    StrategyKind::hybrid,
                                            StrategyKind::plan};
}  // namespace

const char* to_string(StrategyKind kind) {
  switch (kind) {
    case StrategyKind::automatic: return "auto";
    case StrategyKind::local: return "local";
    case StrategyKind::dp: return "dp";
    case StrategyKind::pipeline: return "pipeline";
    case StrategyKind::tensor: return "tensor";
    case StrategyKind::hybrid: return "hybrid";
    case StrategyKind::plan: return "plan";
  }
  return "?";
}

StrategyKind parse_strategy(const std::string& name) {
  for (StrategyKind k : kinds)
    if (name == to_string(k)) return k;
  STRATA_THROW(config, "--strategy: unknown strategy '", name,
               "' (expected auto, local, dp, pipeline, tensor, hybrid or plan)");
}

bool needs_mesh(StrategyKind kind) {
  return kind == StrategyKind::pipeline || kind == StrategyKind::tensor ||
         kind == StrategyKind::hybrid;
}

void check_factors(StrategyKind kind, const MeshFactors& f) {
  STRATA_REQUIRE(!(kind == StrategyKind::local && (f.pp > 1 || f.tp > 1 || f.dp > 1 || f.zero)),
                 config, "--strategy local contradicts --dp/--pp/--tp/--zero (use --strategy hybrid)");
  STRATA_REQUIRE(!(kind == StrategyKind::dp && (f.pp > 1 || f.tp > 1)), config,
                 "--strategy dp contradicts --pp/--tp (use --strategy hybrid)");
  STRATA_REQUIRE(!(kind == StrategyKind::pipeline && f.tp > 1), config,
                 "--strategy pipeline contradicts --tp (use --strategy hybrid)");
  STRATA_REQUIRE(!(kind == StrategyKind::tensor && f.pp > 1), config,
                 "--strategy tensor contradicts --pp (use --strategy hybrid)");
}

MeshShape mesh_for(StrategyKind kind, const MeshFactors& f, int world) {
  MeshShape m;
  m.pp = f.pp > 0 ? f.pp : kind == StrategyKind::pipeline && f.dp == 0 ? world : 1;
  m.tp = f.tp > 0 ? f.tp : kind == StrategyKind::tensor && f.dp == 0 ? world : 1;
  if (f.dp > 0) {
    m.dp = f.dp;
  } else {
    STRATA_REQUIRE(world % (m.pp * m.tp) == 0, config, "--pp ", m.pp, " x --tp ", m.tp, " = ",
                   m.pp * m.tp, " does not divide the ", world, " ranks");
    m.dp = world / (m.pp * m.tp);
  }
  return m;
}

}  // namespace strata
