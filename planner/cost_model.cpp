#include "planner/cost_model.hpp"

#include "backends/error.hpp"
#include "layers/registry.hpp"
#include "layers/sequential.hpp"
#include "planner/planning_comm.hpp"
#include "strategies/tensor_parallel.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace strata::planner {

std::string Layout::str() const {
  std::string s = mesh.str();
  if (mesh.pp > 1)
    s += ", " + std::to_string(micro_batches) + " micro-batches " + to_string(schedule);
  else if (micro_batches > 1)
    s += ", " + std::to_string(micro_batches) + " micro-batches";
  if (zero) s += ", ZeRO-" + std::to_string(zero);
  if (sequence_parallel) s += ", sequence parallel";
  if (recompute) s += ", recompute";
  return s;
}

namespace {
// What a stage computes and sends per sample.
struct StageCost {
  // Per layer (a block's inner layers one by one): forward FLOP and input
  // + output values per sample, and the GEMMs per sample its FLOP are
  // cut into (0: one GEMM over the micro-batch's rows; an attention: two
  // per head and sample), and whether a block recomputes it.
  std::vector<double> flops, values, gemms;
  std::vector<bool> in_block;
  std::vector<std::size_t> top;  // per entry: the stage's top-level layer it belongs to
  std::vector<GemmShape> gemm;   // per entry: a Linear's GEMM per sample (rows per sample), else 0s
  std::vector<double> params;    // per top-level layer
  double tp_fwd = 0, tp_bwd = 0;      // values per sample summed over the tp group
  int tp_fwd_n = 0, tp_bwd_n = 0;     // allreduces per micro-batch
  double send = 0;                    // values per sample sent to the next stage
};

}  // namespace

// The layers of one tensor rank cut into pp stages, and what each stage
// computes and sends per sample.
struct CostModel::Split {
  std::unique_ptr<PlanningComm> comm;  // the tp group the layers refer to (outlives them)
  std::string error;                   // why (tp, pp) cannot be built: "" when it can
  std::vector<std::unique_ptr<Sequential<float>>> stages;
  std::vector<StageCost> cost;
};

CostModel::CostModel(const PlanRequest& request, const MachineProfile& profile)
    : request_(request), profile_(profile) {
  STRATA_REQUIRE(request.ranks > 0, config, "planner: the ranks must be positive");
  STRATA_REQUIRE(request.batch > 0, config, "planner: the batch must be positive");
  per_node_ = request.ranks_per_node > 0 ? request.ranks_per_node
                                         : (profile.gpu ? profile.devices_per_node : request.ranks);
  per_node_ = std::min(per_node_, request.ranks);
  STRATA_REQUIRE(!profile.gpu || per_node_ <= profile.devices_per_node, config, "planner: ",
                 per_node_, " ranks per node, but a node of ", profile.name, " has ",
                 profile.devices_per_node, " devices (one rank each)");
  const int nodes = (request.ranks + per_node_ - 1) / per_node_;
  STRATA_REQUIRE(nodes <= profile.nodes, config, "planner: ", request.ranks, " ranks at ",
                 per_node_, " per node need ", nodes, " nodes, but ", profile.name, " has ",
                 profile.nodes);
  budget_ = request.memory_budget > 0
                ? request.memory_budget
                : static_cast<std::size_t>(profile.memory_per_node / per_node_);
}

CostModel::~CostModel() = default;

double CostModel::rank_bandwidth() const {
  // A GPU's own memory; a CPU node's shared by its ranks.
  return profile_.gpu ? profile_.memory_bandwidth : profile_.memory_bandwidth / per_node_;
}

double CostModel::allreduce_time(double bytes, int n, const Link& link) {
  if (n <= 1) return 0;
  return 2.0 * (n - 1) * (link.latency + bytes / (n * link.bandwidth));
}

const CostModel::Split& CostModel::split(int tp, int pp, bool sequence) const {
  auto& slot = splits_[{tp, pp, sequence}];
  if (slot) return *slot;
  slot = std::make_unique<Split>();
  Split& s = *slot;
  s.comm = std::make_unique<PlanningComm>(tp);
  try {
    TensorParallelLayers<float> all = make_tensor_parallel<float>(
        build_layers<float>(request_.model, 0), *s.comm, request_.loss == LossKind::cross_entropy,
        sequence);
    resolve_ties(all.layers, all.names);
    std::vector<double> params(all.layers.size());
    for (std::size_t i = 0; i < params.size(); ++i)
      params[i] = static_cast<double>(all.layers[i]->num_params());
    const std::vector<std::size_t> bounds = plan_stages(params, all.cut_ok, pp, {});
    Shape input = all.input;
    for (int p = 0; p < pp; ++p) {
      auto stage = std::make_unique<Sequential<float>>(Sequential<float>::stage(input, bounds[p]));
      for (std::size_t i = bounds[p]; i < bounds[p + 1]; ++i) {
        input = all.layers[i]->output_shape(input);
        stage->add(std::move(all.layers[i]), all.names[i]);
      }
      StageCost c;
      for (std::size_t i = 0; i < stage->num_layers(); ++i) {
        const Layer<float>& l = stage->layer(i);
        std::vector<LayerCost> costs;  // a block's inner layers one by one
        l.add_costs(costs);
        for (std::size_t e = 0; e < costs.size(); ++e) {
          const LayerCost& k = costs[e];
          c.top.push_back(i);
          c.gemm.push_back(k.gemm);
          c.flops.push_back(k.flops);
          c.values.push_back(k.values);
          c.gemms.push_back(k.small_gemms);
          c.in_block.push_back(k.in_block);
          if (k.tp_forward > 0) c.tp_fwd += k.tp_forward, ++c.tp_fwd_n;
          // The model's first layer's input gradient is needed by nobody.
          if (k.tp_backward > 0 && !(p == 0 && i == 0 && e == 0)) c.tp_bwd += k.tp_backward, ++c.tp_bwd_n;
        }
        c.params.push_back(static_cast<double>(l.num_params()));
      }
      c.send = p + 1 < pp ? static_cast<double>(stage->out_features()) : 0.0;
      s.cost.push_back(c);
      s.stages.push_back(std::move(stage));
    }
  } catch (const Error& e) {
    s.error = e.message();
    s.stages.clear();
  }
  return s;
}

int CostModel::threads_per_rank() const {
  return profile_.gpu ? 1 : std::max(1, profile_.devices_per_node / per_node_);
}

std::vector<GemmShape> CostModel::gemm_shapes(const Layout& l) const {
  std::vector<GemmShape> out;
  const Split& s = split(l.mesh.tp, l.mesh.pp, l.sequence_parallel);
  if (!s.error.empty() || l.mesh.dp < 1 || l.micro_batches == 0) return out;
  const std::size_t m = micro_batch_samples(l);
  for (const StageCost& c : s.cost)
    for (const GemmShape& g : c.gemm)
      if (g.n > 0) out.push_back({g.rows * m, g.n, g.k});
  return out;
}

std::size_t CostModel::micro_batch_samples(const Layout& l) const {
  const std::size_t dp = static_cast<std::size_t>(l.mesh.dp);
  const std::size_t shard = (request_.batch + dp - 1) / dp;  // the largest (BatchLoader::shard)
  return (shard + l.micro_batches - 1) / l.micro_batches;
}

double CostModel::layer_time(double flops, double gemms, double values, double rate) const {
  const double bandwidth = rank_bandwidth();
  // `gemms` GEMMs (0: one) of flops / gemms each, each at its size's rate:
  // (size + f_half) / R apiece.
  const double compute = flops > 0 ? (flops + std::max(gemms, 1.0) * profile_.gemm_half_flops) / rate : 0;
  return compute + 2.0 * values * sizeof(float) / bandwidth + profile_.launch;
}

double CostModel::exposed_bucket_time(const std::vector<double>& params,
                                      const std::vector<double>& backward, int dp,
                                      const Link& link, double fraction) {
  // GradientSync's buckets: bucket_bytes of gradients from the end of the
  // flat buffer, each launched when the layer holding its first value has
  // finished backward, one allreduce after another.
  const double cap = static_cast<double>(GradSyncOptions{}.bucket_bytes / sizeof(float));
  double offset = 0, clock = 0, busy_until = 0;
  for (double n : params) offset += n;
  double end = offset;  // of the next bucket
  for (std::size_t k = params.size(); k-- > 0;) {
    offset -= params[k];
    clock += backward[k];  // layer k's gradients are written
    // Launch every bucket whose values all lie at or above this layer's.
    for (double begin = std::max(0.0, end - cap); end > 0 && begin >= offset;
         begin = std::max(0.0, end - cap)) {
      busy_until = std::max(busy_until, clock) + fraction * allreduce_time((end - begin) * 4, dp, link);
      end = begin;
    }
  }
  return std::max(0.0, busy_until - clock);
}

Prediction CostModel::predict(const Layout& l) const {
  Prediction pr;
  pr.layout = l;
  const int dp = l.mesh.dp, pp = l.mesh.pp, tp = l.mesh.tp;
  const std::size_t B = request_.batch, M = l.micro_batches;
  if (l.mesh.size() != request_.ranks) {
    pr.rejected = "the mesh has " + std::to_string(l.mesh.size()) + " ranks, not " +
                  std::to_string(request_.ranks);
    return pr;
  }
  if (B < static_cast<std::size_t>(dp)) {
    pr.rejected = "a batch of " + std::to_string(B) + " gives some of the " + std::to_string(dp) +
                  " data-parallel ranks no sample";
    return pr;
  }
  const std::size_t shard = (B + dp - 1) / dp;  // the largest (BatchLoader::shard)
  if (M == 0 || M > shard) {
    pr.rejected = std::to_string(M) + " micro-batches of a shard of " + std::to_string(shard) +
                  " samples";
    return pr;
  }
  if (l.zero && dp == 1) {
    pr.rejected = "ZeRO-" + std::to_string(l.zero) + " without data parallelism";
    return pr;
  }
  const Split& s = split(tp, pp, l.sequence_parallel);
  if (!s.error.empty()) {
    pr.rejected = s.error;
    return pr;
  }
  // Memory: every stage's rank, as ModelParallel counts it.
  ModelParallelOptions o;
  o.mesh = l.mesh;
  o.micro_batches = M;
  o.schedule = l.schedule;
  o.zero = l.zero;
  o.sequence_parallel = l.sequence_parallel;
  o.precision = request_.precision;
  for (int p = 0; p < pp; ++p) {
    Sequential<float>& stage = *s.stages[static_cast<std::size_t>(p)];
    for (std::size_t i = 0; i < stage.num_layers(); ++i) set_recompute(stage.layer(i), l.recompute);
    const MemoryReport m = stage_memory(stage, o, request_.optimizer, shard, p);
    if (m.total() > pr.memory.total()) {
      pr.memory = m;
      pr.stage_with_most_memory = p;
    }
  }
  if (pr.memory.total() > budget_) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "needs %.2f MiB per rank", pr.memory.total() / 1048576.0);
    std::string over(buf);
    std::snprintf(buf, sizeof buf, "), over the budget of %.2f MiB", budget_ / 1048576.0);
    pr.rejected = over + " (stage " + std::to_string(pr.stage_with_most_memory) + ": " +
                  pr.memory.str() + buf;
  }
  // Time. A rank's GEMM rate: one device (GPU), or its share of the node's cores.
  const double cores = profile_.gpu ? 1.0 : std::max(1.0, double(profile_.devices_per_node) / per_node_);
  const double rate = profile_.gemm_flops(request_.precision) * cores;
  const std::size_t samples = micro_batch_samples(l);
  const double m = static_cast<double>(samples);  // samples per micro-batch
  const int threads = threads_per_rank();
  const Link& tp_link = tp <= per_node_ ? profile_.intra_node : profile_.inter_node;
  const Link& pp_link = tp * pp <= per_node_ ? profile_.intra_node : profile_.inter_node;
  const Link& dp_link = request_.ranks <= per_node_ ? profile_.intra_node : profile_.inter_node;
  const double value = request_.precision == Precision::fp32 ? 4.0 : 2.0;  // activation bytes
  double slowest = 0, slowest_compute = 0, slowest_tp = 0, slowest_send = 0;
  std::vector<double> backward, last_backward;  // per top-level layer, one micro-batch
  const StageCost* slowest_cost = nullptr;
  for (int p = 0; p < pp; ++p) {
    const StageCost& c = s.cost[static_cast<std::size_t>(p)];
    double fwd = 0, bwd = 0;
    backward.assign(c.params.size(), 0.0);
    for (std::size_t i = 0; i < c.flops.size(); ++i) {
      const GemmShape& g = c.gemm[i];
      const MeasuredGemm* measured =
          g.n > 0 ? profile_.measured(g.rows * samples, g.n, g.k, threads, per_node_) : nullptr;
      double t, b;
      if (measured) {  // the measured GEMMs, and the rest of the layer as usual
        const double rest = layer_time(0, 0, c.values[i] * m, rate);
        t = measured->forward + rest;
        b = measured->backward + 2 * rest;
      } else {
        t = layer_time(c.flops[i] * m, c.gemms[i] * m, c.values[i] * m, rate);
        b = 2 * t;
      }
      fwd += t;
      b += l.recompute && c.in_block[i] ? t : 0.0;
      bwd += b;
      backward[c.top[i]] += b;
    }
    const double tpc =
        c.tp_fwd_n * allreduce_time(c.tp_fwd / std::max(1, c.tp_fwd_n) * m * 4, tp, tp_link) +
        c.tp_bwd_n * allreduce_time(c.tp_bwd / std::max(1, c.tp_bwd_n) * m * 4, tp, tp_link);
    const double send = c.send > 0 ? 2 * pp_link.time(c.send * m * value) : 0.0;  // activation, gradient
    const double slot = fwd + bwd + (tp > 1 ? tpc : 0.0) + send;
    if (slot > slowest) {
      slowest = slot;
      slowest_compute = fwd + bwd;
      slowest_tp = tp > 1 ? tpc : 0.0;
      slowest_send = send;
      last_backward = backward;
      slowest_cost = &c;
    }
  }
  double grads = 0;
  for (double n : slowest_cost->params) grads += n;
  const double updated = l.zero ? grads / dp : grads;
  pr.compute = slowest_compute * M;
  pr.tensor_comm = slowest_tp * M;
  pr.pipeline_comm = slowest_send * M;
  pr.bubble = slowest * (pp - 1);
  if (dp > 1) {
    if (l.zero) {
      // ZeRO (strategies/sharded_optimizer.hpp): a reduce-scatter per unit
      // as backward completes it (half an allreduce, overlapped like the
      // buckets; ZeRO-2 and 3 also in every earlier micro-batch, counted as
      // not hidden), then the updated shards all-gathered (the other half;
      // ZeRO-3 instead gathers every unit before its forward and its
      // backward, prefetched: exposed where the gathers outlast the compute).
      const Link& link = request_.ranks <= per_node_ && profile_.reduce_scatter_allgather.bandwidth > 0
                             ? profile_.reduce_scatter_allgather
                             : dp_link;
      const double half = 0.5 * allreduce_time(grads * 4, dp, link);
      pr.data_comm = exposed_bucket_time(slowest_cost->params, last_backward, dp, link, 0.5);
      if (l.zero >= 2) pr.data_comm += static_cast<double>(M - 1) * half;
      if (l.zero >= 3) pr.data_comm += std::max(0.0, 2.0 * static_cast<double>(M) * half - pr.compute);
      else pr.data_comm += half;
    } else {
      pr.data_comm = exposed_bucket_time(slowest_cost->params, last_backward, dp, dp_link);
    }
  }
  // The optimizer reads and writes its values: the weight, gradient and state.
  const double state = static_cast<double>(state_elements(request_.optimizer, 1));
  const double bandwidth = rank_bandwidth();
  pr.optimizer = updated * (3 + 2 * state) * 4 / bandwidth;
  pr.step = slowest * (M + pp - 1) + pr.data_comm + pr.optimizer;
  pr.samples_per_s = static_cast<double>(B) / pr.step;
  return pr;
}

}  // namespace strata::planner
