// The planner's search: every layout of a rank count (dp x pp x tp with
// dp pp tp = ranks; micro-batch counts for pipelines; both schedules;
// ZeRO-1, 2 and 3 with data parallelism; recomputation), each predicted by the cost
// model, ranked (a layout of several micro-batches without a pipeline is
// rejected where it fits in one): the layouts that fit first, fastest first (equal times:
// less memory first; those within SearchOptions::tie of the fastest by
// fewest synchronizations), then the rejected ones with their reasons.
#pragma once

#include "planner/cost_model.hpp"

#include <tuple>
#include <vector>

namespace strata::planner {

struct SearchOptions {
  bool gpipe = true;       // also GPipe (1F1B holds fewer micro-batches, the same time)
  bool zero = true;        // also ZeRO-1, 2 and 3 where dp > 1
  bool recompute = true;   // also with recomputation
  bool sequence = true;    // also sequence parallelism where tp > 1
  std::size_t max_micro_batches = 256;
  // Predictions this close to the fastest (a fraction) are a tie, ranked
  // by fewest synchronizations per step (Prediction::collectives).
  double tie = 0.02;
};

// Micro-batch counts tried for a pipeline of pp stages (pp 1: gradient
// accumulation, for memory) over shards of `shard` samples: powers of two
// and multiples of pp up to the shard.
std::vector<std::size_t> micro_batch_counts(int pp, std::size_t shard, std::size_t most);

// Every layout the search tries, in its order.
std::vector<Layout> layouts(int ranks, std::size_t batch, const SearchOptions& options = {});

std::vector<Prediction> search(const CostModel& model, int ranks, std::size_t batch,
                               const SearchOptions& options = {});

// The layers of a tensor group of tp (stage_layers; how a pipeline cuts
// them changes no layer) on micro-batches of `samples` samples: what a
// layout runs, as calibration measures it.
struct StageSet {
  int tp = 1;
  bool sequence = false;
  std::size_t samples = 0;
  bool operator<(const StageSet& o) const {
    return std::tie(tp, sequence, samples) < std::tie(o.tp, o.sequence, o.samples);
  }
};

// The distinct stage sets of every layout the search tries on `ranks`
// (what `strata-plan calibrate --model` measures).
std::vector<StageSet> stage_sets(const CostModel& model, int ranks, std::size_t batch,
                                 const SearchOptions& options = {});

}  // namespace strata::planner
