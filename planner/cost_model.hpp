// The planner's cost model: for a model, a global batch and a layout
// (dp x pp x tp, micro-batches, schedule, ZeRO stage, recomputation), the step
// time and the memory of every rank on a machine (planner/profile.hpp),
// without running anything.
//
// Memory is the engine's own accounting (stage_memory: what ModelParallel
// allocates), on the layers make_tensor_parallel builds for the tensor size
// and the stages plan_stages cuts, as strata-train would. Time, per step:
//
//   per layer (a block's inner layers one by one) and micro-batch of m
//   samples on a rank with GEMM rate R (a top-level layer the profile
//   measured on m samples, measured_layers: those times instead, its
//   tensor-parallel sums included):
//     forward   t_f = (f + g f_half) / R + 2 (in + out) m 4 B / bw + launch
//                     (f = the layer's FLOP for m samples, in g GEMMs: one
//                     over the rows, 2 heads m for an attention core; each
//                     GEMM of size s runs at R s / (s + f_half), f_half from
//                     the profile)
//     backward  t_b = 2 t_f (weight and input gradient); recomputation adds
//               the forward of the blocks' layers
//   tensor parallelism: an allreduce over the tp group per row-parallel
//     output and vocabulary-parallel embedding (forward) and per
//     column-parallel input gradient (backward), ring cost
//     2 (n - 1) (latency + bytes / (n bandwidth)) on the node's link when
//     the group fits in a node, else the inter-node one
//   pipeline: M micro-batch slots of the slowest stage (a slot: the
//     stage's compute, tensor transfers and the activation it sends), and
//     the bubble, every other stage's slot once (the fill and the drain;
//     S - 1 slots of equal stages; GPipe and 1F1B alike)
//   data parallelism: ring allreduces of the stage's gradient buckets
//     (GradientSync's 25 MiB from the end), each started when the last
//     micro-batch's backward has written it and the previous one is done;
//     what runs past backward counts. ZeRO: the same buckets as
//     reduce-scatters (half an allreduce each; ZeRO-2 and 3 also in every
//     earlier micro-batch, not hidden), then an allgather of the updated
//     weights (the other half, not hidden; ZeRO-3 instead gathers every unit
//     before its forward and backward, exposed where that outlasts the
//     compute), on the profile's reduce_scatter_allgather link inside a node
//     when it has one. On a CPU profile whose ranks share a node nothing
//     is hidden: the cores that compute make the copies, so every bucket
//     follows backward and ZeRO-3's gathers count whole
//   optimizer: the rank's updated values read and written at the update
//     rate the profile measured for these ranks (measured_updates), else at
//     memory bandwidth
//   the step's other work: where the profile measured whole steps of this
//     model and batch on these ranks, all on one node (measured_steps:
//     plain data parallelism, as strata-train runs it), what that step took
//     beyond this model's prediction of the same layout (the loss, the
//     small allreduces of the loss and the checks, the ranks' waits for one
//     another), added to every layout of that many ranks; a negative one
//     takes at most half of a layout's time off
//
// What it leaves out: kernel fusion and cache effects beyond f_half and the
// measured layers (which run each layer alone, every rank the same), the
// overlap of tensor-parallel transfers with compute (Strata has none),
// contention between the ranks' transfers on a shared link, stragglers.
#pragma once

#include "layers/layer_cost.hpp"
#include "layers/loss.hpp"
#include "layers/model_spec.hpp"
#include "layers/optimizer.hpp"
#include "planner/profile.hpp"
#include "strategies/model_parallel.hpp"

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace strata::planner {

// The micro-batch count strata-train and strata-plan take when none is
// given: two per stage with a pipeline (the bubble is then (pp - 1) /
// (3 pp - 1) of a step), one without (more would only shrink the GEMMs).
inline std::size_t default_micro_batches(int pp) {
  return pp > 1 ? 2 * static_cast<std::size_t>(pp) : 1;
}

struct Layout {
  MeshShape mesh;
  std::size_t micro_batches = 1;
  Schedule schedule = Schedule::one_f_one_b;
  int zero = 0;
  bool recompute = false;
  bool sequence_parallel = false;  // with tp > 1
  // "dp 2 x pp 2 x tp 2, 4 micro-batches 1f1b, ZeRO-1, sequence parallel, recompute"
  std::string str() const;
};

// GemmShape (a GEMM as a layout runs it): layers/layer_cost.hpp.

struct Prediction {
  Layout layout;
  std::string rejected;  // "" when the layout fits and runs; else why not
  double step = 0;       // seconds per step
  double samples_per_s = 0;
  // Where the step goes, seconds: the slowest stage's compute over the
  // micro-batches, the pipeline's bubble, tensor- and pipeline-parallel
  // transfers, data-parallel sums not hidden behind backward, the optimizer.
  double compute = 0, bubble = 0, tensor_comm = 0, pipeline_comm = 0, data_comm = 0,
         optimizer = 0;
  double other = 0;  // the step's other work (measured_steps), 0 without
  MemoryReport memory;  // the rank that needs the most
  int stage_with_most_memory = 0;
  // Collectives and messages a rank of the slowest stage takes part in per
  // step (each a synchronization of ranks): the search's tie-break.
  double collectives = 0;
};

struct PlanRequest {
  ModelSpec model;
  LossKind loss = LossKind::cross_entropy;
  OptimizerConfig optimizer;
  Precision precision = Precision::fp32;
  std::size_t batch = 0;       // global
  int ranks = 1;
  // Ranks per node: 0 for the profile's devices per node (GPU: one rank
  // per device), capped by the ranks.
  int ranks_per_node = 0;
  std::size_t memory_budget = 0;  // bytes per rank; 0: the node's memory / ranks per node
};

// The layers strata-train builds for a tensor rank: the model's layers made
// tensor-parallel over `tp` (with sequence parallelism: `sequence`), ties
// resolved, and where plan_stages cuts them into pp stages (stage p holds
// layers bounds[p] to bounds[p + 1]). Throws config when the layout cannot
// be built.
struct StageLayers {
  std::vector<LayerPtr<float>> layers;
  std::vector<std::string> names;
  std::vector<std::size_t> bounds;
  Shape input;  // of the model
};
StageLayers stage_layers(const PlanRequest& request, comm::Communicator& tp, int pp, bool sequence);
// A top-level layer's key in a profile's measured_layers: what it is, its
// input shape, and its tensor group.
std::string layer_key(const Layer<float>& layer, int tp, bool sequence);
// A model's key in a profile's measured_steps: its top-level layers, their
// parameters, the loss and the precision ("5 layers, 1863690 parameters,
// cross-entropy, fp32, fnv 8c1d..."; the hash of the layers' keys).
std::string model_key(const PlanRequest& request);

class CostModel {
 public:
  // Throws config for a request no layout can serve (no ranks, no batch,
  // more ranks per node than a GPU node has devices).
  CostModel(const PlanRequest& request, const MachineProfile& profile);
  ~CostModel();

  Prediction predict(const Layout& layout) const;
  // The same without the step's other work (what the measured steps are
  // compared with).
  Prediction predict_parts(const Layout& layout) const;
  // The data-parallel layout whose measured step gives the other work:
  // every rank a data-parallel rank.
  Layout data_parallel_layout() const;

  int ranks_per_node() const { return per_node_; }
  // Threads (cores) of one rank of a CPU profile; 1 on a GPU profile.
  int threads_per_rank() const;
  // Samples per micro-batch of the layout's largest data-parallel shard.
  std::size_t micro_batch_samples(const Layout& l) const;
  const PlanRequest& request() const { return request_; }
  std::size_t memory_budget() const { return budget_; }
  // Seconds of a ring allreduce of `bytes` over n ranks on a link.
  static double allreduce_time(double bytes, int n, const Link& link);
  // Seconds the data-parallel allreduce of a stage's gradients adds after
  // its last backward: GradientSync's buckets (GradSyncOptions' default
  // size, from the last layer's end) each start when backward has written
  // them and the previous bucket is done. params, backward: per top-level
  // layer, its parameters and its backward seconds; fraction: of an
  // allreduce's time each bucket takes (ZeRO's reduce-scatter: 0.5).
  static double exposed_bucket_time(const std::vector<double>& params,
                                    const std::vector<double>& backward, int dp, const Link& link,
                                    double fraction = 1.0);

 private:
  struct Split;  // the layers and stages of one (tp, pp)
  // sequence: with sequence parallelism (tp > 1).
  const Split& split(int tp, int pp, bool sequence = false) const;
  double layer_time(double flops, double gemms, double values, double rate) const;
  double rank_bandwidth() const;  // memory bandwidth one rank has
  // The other work per step (measured_steps), found on first use.
  double other_work() const;

  PlanRequest request_;
  MachineProfile profile_;
  int per_node_ = 1;
  std::size_t budget_ = 0;
  mutable std::map<std::tuple<int, int, bool>, std::unique_ptr<Split>> splits_;
  mutable double other_ = 0;
  mutable bool other_found_ = false;
};

}  // namespace strata::planner
