#include "planner/cost_model.hpp"

#include "backends/error.hpp"
#include "layers/registry.hpp"
#include "layers/sequential.hpp"
#include "planner/planning_comm.hpp"
#include "strategies/tensor_parallel.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
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
  // per head and sample), and whether a block recomputes it; values per
  // sample it sums over the tp group in forward and in backward.
  std::vector<double> flops, values, gemms, tp_fwd, tp_bwd;
  std::vector<bool> in_block;
  std::vector<std::size_t> top;  // per entry: the stage's top-level layer it belongs to
  std::vector<double> params;    // per top-level layer
  std::vector<std::string> keys;  // per top-level layer: layer_key
  std::vector<bool> recomputes;   // per top-level layer: a block's (recomputed when asked)
  double send = 0;                // values per sample sent to the next stage
};

}  // namespace

StageLayers stage_layers(const PlanRequest& request, comm::Communicator& tp, int pp, bool sequence) {
  TensorParallelLayers<float> all = make_tensor_parallel<float>(
      build_layers<float>(request.model, 0), tp, request.loss == LossKind::cross_entropy, sequence);
  resolve_ties(all.layers, all.names);
  std::vector<double> params(all.layers.size());
  for (std::size_t i = 0; i < params.size(); ++i)
    params[i] = static_cast<double>(all.layers[i]->num_params());
  StageLayers out;
  out.bounds = plan_stages(params, all.cut_ok, pp, {});
  out.layers = std::move(all.layers);
  out.names = std::move(all.names);
  out.input = all.input;
  return out;
}

std::string layer_key(const Layer<float>& layer, int tp, bool sequence) {
  return layer.name() + " in " + layer.input_shape().str() + " tp " + std::to_string(tp) +
         (sequence ? " sequence-parallel" : "");
}

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
    StageLayers all = stage_layers(request_, *s.comm, pp, sequence);
    Shape input = all.input;
    for (int p = 0; p < pp; ++p) {
      s.stages.push_back(std::make_unique<Sequential<float>>(Sequential<float>::stage(input, all.bounds[p])));
      Sequential<float>& stage = *s.stages.back();
      for (std::size_t i = all.bounds[p]; i < all.bounds[p + 1]; ++i) {
        input = all.layers[i]->output_shape(input);
        stage.add(std::move(all.layers[i]), all.names[i]);
      }
      StageCost c;
      for (std::size_t i = 0; i < stage.num_layers(); ++i) {
        const Layer<float>& l = stage.layer(i);
        std::vector<LayerCost> costs;  // a block's inner layers one by one
        l.add_costs(costs);
        bool block = false;
        for (std::size_t e = 0; e < costs.size(); ++e) {
          const LayerCost& k = costs[e];
          c.top.push_back(i);
          c.flops.push_back(k.flops);
          c.values.push_back(k.values);
          c.gemms.push_back(k.small_gemms);
          c.in_block.push_back(k.in_block);
          block = block || k.in_block;
          c.tp_fwd.push_back(k.tp_forward);
          // The model's first layer's input gradient is needed by nobody.
          c.tp_bwd.push_back(p == 0 && i == 0 && e == 0 ? 0.0 : k.tp_backward);
        }
        c.params.push_back(static_cast<double>(l.num_params()));
        c.keys.push_back(layer_key(l, tp, sequence));
        c.recomputes.push_back(block);
      }
      c.send = p + 1 < pp ? static_cast<double>(stage.out_features()) : 0.0;
      s.cost.push_back(c);
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

std::string model_key(const PlanRequest& request) {
  PlanningComm alone(1);
  const StageLayers all = stage_layers(request, alone, 1, false);
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the layers' keys
  std::size_t params = 0;
  for (const auto& l : all.layers) {
    for (const char c : layer_key(*l, 1, false) + ";") h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    params += l->num_params();
  }
  char hash[24];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(h));
  return std::to_string(all.layers.size()) + " layers, " + std::to_string(params) + " parameters, " +
         to_string(request.loss) + ", " + to_string(request.precision) + ", fnv " + hash;
}

Layout CostModel::data_parallel_layout() const {
  Layout l;
  l.mesh = {request_.ranks, 1, 1};
  return l;
}

double CostModel::other_work() const {
  if (other_found_) return other_;
  other_found_ = true;
  // Measured on thread ranks of one node: not for ranks across nodes.
  if (profile_.measured_steps.empty() || per_node_ != request_.ranks) return other_;
  const MeasuredStep* m = profile_.measured_step(model_key(request_), request_.batch,
                                                 request_.optimizer.kind, threads_per_rank(),
                                                 request_.ranks);
  if (!m) return other_;
  // The layout's time, also where a memory budget rejects it (the step was
  // measured without the budget).
  const Prediction dp = predict_parts(data_parallel_layout());
  if (dp.step > 0) other_ = m->step - dp.step;
  return other_;
}

Prediction CostModel::predict(const Layout& l) const {
  Prediction pr = predict_parts(l);
  if (pr.step <= 0) return pr;
  // A measured step below the parts' prediction (layers timed in a slower
  // phase of the machine) takes at most half of a layout's time off.
  pr.other = std::max(other_work(), -0.5 * pr.step);
  pr.step += pr.other;
  pr.samples_per_s = static_cast<double>(request_.batch) / pr.step;
  return pr;
}

Prediction CostModel::predict_parts(const Layout& l) const {
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
  double slowest = 0, slowest_compute = 0, slowest_tp = 0, slowest_send = 0, slots = 0;
  std::vector<double> backward, last_backward;  // per top-level layer, one micro-batch
  const StageCost* slowest_cost = nullptr;
  for (int p = 0; p < pp; ++p) {
    const StageCost& c = s.cost[static_cast<std::size_t>(p)];
    double fwd = 0, bwd = 0, tpc = 0;
    backward.assign(c.params.size(), 0.0);
    // The top-level layers the profile measured on this micro-batch: their
    // times (their tp sums inside), the others' entries from the rate curve.
    std::vector<const MeasuredLayer*> measured(c.params.size(), nullptr);
    for (std::size_t j = 0; j < measured.size(); ++j) {
      measured[j] = profile_.measured(c.keys[j], samples, threads, per_node_);
      if (!measured[j]) continue;
      const double t = measured[j]->forward;
      const double b = measured[j]->backward + (l.recompute && c.recomputes[j] ? t : 0.0);
      fwd += t;
      bwd += b;
      backward[j] += b;
    }
    for (std::size_t i = 0; i < c.flops.size(); ++i) {
      if (measured[c.top[i]]) continue;
      const double t = layer_time(c.flops[i] * m, c.gemms[i] * m, c.values[i] * m, rate);
      const double b = 2 * t + (l.recompute && c.in_block[i] ? t : 0.0);
      fwd += t;
      bwd += b;
      backward[c.top[i]] += b;
      if (c.tp_fwd[i] > 0) tpc += allreduce_time(c.tp_fwd[i] * m * 4, tp, tp_link);
      if (c.tp_bwd[i] > 0) tpc += allreduce_time(c.tp_bwd[i] * m * 4, tp, tp_link);
    }
    const double send = c.send > 0 ? 2 * pp_link.time(c.send * m * value) : 0.0;  // activation, gradient
    const double slot = fwd + bwd + (tp > 1 ? tpc : 0.0) + send;
    slots += slot;
    if (slot > slowest) {
      slowest = slot;
      slowest_compute = fwd + bwd;
      slowest_tp = tp > 1 ? tpc : 0.0;
      slowest_send = send;
      last_backward = backward;
      slowest_cost = &c;
    }
  }
  double grads = 0, pieces = 0;
  for (double n : slowest_cost->params) grads += n, pieces += n > 0 ? 1 : 0;
  // Synchronizations per step: tensor sums and pipeline messages per
  // micro-batch, then the data-parallel sums.
  double tp_sums = 0;
  for (std::size_t i = 0; i < slowest_cost->tp_fwd.size(); ++i)
    tp_sums += (slowest_cost->tp_fwd[i] > 0) + (slowest_cost->tp_bwd[i] > 0);
  const double buckets = std::ceil(grads * 4 / static_cast<double>(GradSyncOptions{}.bucket_bytes));
  pr.collectives = static_cast<double>(M) * ((tp > 1 ? tp_sums : 0.0) + (pp > 1 ? 2.0 : 0.0));
  if (dp > 1)
    pr.collectives += l.zero == 0   ? buckets
                      : l.zero == 1 ? 2 * buckets
                      : l.zero == 2 ? static_cast<double>(M) * buckets + buckets
                                    : 3 * static_cast<double>(M) * pieces;
  const double updated = l.zero ? grads / dp : grads;
  pr.compute = slowest_compute * M;
  pr.tensor_comm = slowest_tp * M;
  pr.pipeline_comm = slowest_send * M;
  // A pipeline's fill and drain: each other stage's slot once (with equal
  // stages, S - 1 slots of the slowest).
  pr.bubble = slots - slowest;
  // On a CPU node every core computes, so a collective between its ranks
  // (copies made by those cores) hides behind nothing: the buckets all wait
  // for the end of backward, and ZeRO-3's gathers count whole.
  const bool copies_by_cores = !profile_.gpu && request_.ranks <= per_node_;
  if (copies_by_cores) std::fill(last_backward.begin(), last_backward.end(), 0.0);
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
      if (l.zero >= 3)
        pr.data_comm += copies_by_cores ? 2.0 * static_cast<double>(M) * half
                                        : std::max(0.0, 2.0 * static_cast<double>(M) * half - pr.compute);
      else pr.data_comm += half;
    } else {
      pr.data_comm = exposed_bucket_time(slowest_cost->params, last_backward, dp, dp_link);
    }
  }
  // The optimizer reads and writes its values: the weight, gradient and state.
  const double state = static_cast<double>(state_elements(request_.optimizer, 1));
  // At the update rate calibration measured on these ranks, else at memory bandwidth.
  const double measured_update = profile_.update_bandwidth(request_.optimizer.kind, threads, per_node_);
  const double bandwidth = measured_update > 0 ? measured_update : rank_bandwidth();
  pr.optimizer = updated * (3 + 2 * state) * 4 / bandwidth;
  pr.step = slowest * static_cast<double>(M) + pr.bubble + pr.data_comm + pr.optimizer;
  pr.samples_per_s = static_cast<double>(B) / pr.step;
  return pr;
}

}  // namespace strata::planner
