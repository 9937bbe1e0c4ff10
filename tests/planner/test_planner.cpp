// The planner (planner/): machine profiles (the shipped ones load; a missing
// or bad field is named), the memory it predicts against what ModelParallel
// itself reserves on thread ranks (the oracle: the same bytes), the time
// formulas against hand computations, and the search (every layout of the
// rank count, the rejected ones with their reasons; 4096 ranks).
#include "backends/comm/threads.hpp"
#include "backends/ranks.hpp"
#include "dp_harness.hpp"
#include "planner/calibrate.hpp"
#include "planner/planning_comm.hpp"
#include "planner/profile.hpp"
#include "planner/search.hpp"
#include "test_utils.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <tuple>

#ifndef STRATA_SOURCE_DIR
#error "tests need STRATA_SOURCE_DIR"
#endif

namespace strata {
namespace {

using planner::CostModel;
using planner::Layout;
using planner::MachineProfile;
using planner::PlanRequest;
using planner::Prediction;

// A small CPU machine with round figures (the time checks compute them by hand).
MachineProfile cpu_profile() {
  MachineProfile p;
  p.name = "test machine";
  p.nodes = 1;
  p.devices_per_node = 4;
  p.memory_per_node = 16e9;
  p.gemm_flops_fp32 = p.gemm_flops_16 = 1e10;
  p.gemm_half_flops = 1e6;
  p.memory_bandwidth = 1e10;
  p.launch = 1e-6;
  p.intra_node = {1e-6, 1e9};
  p.inter_node = {1e-5, 1e8};
  return p;
}

std::string profile_path(const std::string& name) {
  return std::string(STRATA_SOURCE_DIR) + "/planner/profiles/" + name;
}

TEST(PlannerProfile, TheShippedProfilesLoadAndRoundTrip) {
  for (const char* name : {"dgx-a100.json", "dgx-h100.json"}) {
    const MachineProfile p = planner::load_profile(profile_path(name));
    EXPECT_TRUE(p.gpu) << name;
    EXPECT_EQ(p.devices_per_node, 8) << name;
    EXPECT_GT(p.gemm_flops_16, p.gemm_flops_fp32) << name;
    const std::string copy = (std::filesystem::temp_directory_path() / "strata-test-profile.json").string();
    planner::save_profile(p, copy);
    const MachineProfile q = planner::load_profile(copy);
    EXPECT_EQ(planner::profile_json(q), planner::profile_json(p)) << name;
    std::filesystem::remove(copy);
  }
}

TEST(PlannerProfile, AMissingOrBadFieldIsNamed) {
  const std::string text = planner::profile_json(cpu_profile());
  const std::string file = (std::filesystem::temp_directory_path() / "strata-test-bad-profile.json").string();
  auto error_for = [&](const std::string& body) {
    std::ofstream(file) << body;
    try {
      planner::load_profile(file);
    } catch (const Error& e) {
      return std::string(e.message());
    }
    return std::string("no error");
  };
  auto without = [&](const std::string& field) {
    std::string t = text;
    const auto at = t.find("\"" + field + "\"");
    const auto end = t.find('\n', at);
    t.erase(at, end - at + 1);
    return t;
  };
  EXPECT_NE(error_for(without("launch")).find("has no 'launch'"), std::string::npos);
  std::string t = text;
  t.replace(t.find("\"bandwidth\": 100000000.0"), 24, "\"bandwidth\": -1");
  EXPECT_NE(error_for(t).find("'inter_node.bandwidth' must be a positive number"), std::string::npos)
      << error_for(t);
  EXPECT_NE(error_for("{}").find("not a machine profile"), std::string::npos);
  EXPECT_NE(error_for("{ nope").find("not a JSON machine profile"), std::string::npos);
  std::filesystem::remove(file);
}

PlanRequest request(const test::DpConfig& c, int ranks) {
  PlanRequest r;
  r.model = test::model_of(c);
  r.optimizer = c.optimizer;
  r.batch = c.batch;
  r.ranks = ranks;
  return r;
}

// The memory the planner predicts is what ModelParallel reserves on every
// rank (the largest of them), byte for byte: the MLP and the GPT on
// data-parallel, pipeline (both schedules), tensor-parallel and ZeRO-1 layouts
// (and the GPT with sequence parallelism, alone and in a pipeline).
TEST(PlannerMemory, IsWhatTheEngineReserves) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  test::DpConfig mlp;
  mlp.widths = {12, 32, 32, 16, 3};
  mlp.batch = 16;
  mlp.optimizer = {OptimizerKind::adam, 0.001};
  test::DpConfig gpt = test::gpt_config(true, 2, 12);
  gpt.batch = 8;
  std::vector<Layout> layouts(7);
  layouts[0].mesh = {2, 1, 1};
  layouts[1].mesh = {1, 2, 1}, layouts[1].micro_batches = 4;
  layouts[2].mesh = {1, 2, 1}, layouts[2].micro_batches = 4, layouts[2].schedule = Schedule::gpipe;
  layouts[3].mesh = {1, 1, 2}, layouts[3].recompute = true;
  layouts[4].mesh = {2, 1, 1}, layouts[4].zero = 1;
  layouts[5].mesh = {1, 1, 2}, layouts[5].sequence_parallel = true;
  layouts[6].mesh = {1, 2, 2}, layouts[6].micro_batches = 2, layouts[6].sequence_parallel = true;
  for (const test::DpConfig& c : {mlp, gpt})
    for (const Layout& l : layouts) {
      if (l.sequence_parallel && c.model.empty()) continue;  // an MLP has no sequence
      const CostModel model(request(c, l.mesh.size()), cpu_profile());
      const Prediction p = model.predict(l);
      ASSERT_EQ(p.rejected, "") << l.str();
      std::size_t most = 0;
      std::mutex mutex;
      run_ranks(l.mesh.size(), 1, [&](Context& ctx, comm::Communicator& world) {
        ModelParallelOptions o;
        o.mesh = l.mesh;
        o.micro_batches = l.micro_batches;
        o.schedule = l.schedule;
        o.zero = l.zero;
        o.recompute = l.recompute;
        o.sequence_parallel = l.sequence_parallel;
        const std::size_t shard = (c.batch + l.mesh.dp - 1) / l.mesh.dp;
        ModelParallel<float> mp(ctx, world, test::model_of(c), Init::kaiming_uniform, 1,
                                LossKind::cross_entropy, c.optimizer, shard, o);
        std::lock_guard<std::mutex> lock(mutex);
        most = std::max(most, mp.memory().total());
      });
      EXPECT_EQ(p.memory.total(), most) << (c.model.empty() ? "MLP, " : "GPT, ") << l.str();
    }
}

// The time of a layout as the formulas of planner/cost_model.hpp give it,
// computed here by hand for an MLP on one rank and on two data-parallel ranks.
TEST(PlannerTime, FollowsTheFormulas) {
  test::DpConfig c;
  c.widths = {100, 200, 10};
  c.batch = 64;
  c.optimizer = {OptimizerKind::sgd, 0.1};  // no state
  const MachineProfile prof = cpu_profile();
  // Layers: Linear(100, 200), ReLU, Linear(200, 10); FLOP and values per sample.
  const double flops[] = {2.0 * 100 * 200, 200, 2.0 * 200 * 10};
  const double values[] = {300, 400, 210};
  auto step = [&](int ranks) {
    const double m = 64.0 / ranks, cores = 4.0 / ranks, rate = 1e10 * cores, bw = 1e10 / ranks;
    double fwd = 0;
    for (int i = 0; i < 3; ++i) {
      const double f = flops[i] * m;
      fwd += f * (f + 1e6) / (f * rate) + 2 * values[i] * m * 4 / bw + 1e-6;
    }
    const double params = 100 * 200 + 200 + 200 * 10 + 10;
    const double ar = ranks > 1 ? 2.0 * (ranks - 1) * (1e-6 + params * 4 / (ranks * 1e9)) : 0.0;
    // One bucket (all 22,210 gradients), launched when layer 0's backward has
    // written it: the whole allreduce follows backward.
    return 3 * fwd + ar + params * 3 * 4 / bw;
  };
  for (int ranks : {1, 2}) {
    Layout l;
    l.mesh = {ranks, 1, 1};
    const Prediction p = CostModel(request(c, ranks), prof).predict(l);
    ASSERT_EQ(p.rejected, "");
    EXPECT_NEAR(p.step, step(ranks), 1e-12 * step(ranks)) << ranks << " ranks";
    EXPECT_NEAR(p.samples_per_s, 64 / p.step, 1e-9 * p.samples_per_s);
  }
  // A pipeline of 2 stages and 4 micro-batches of 16: M slots of the
  // slowest stage, and the other's slot once (the fill and the drain). A
  // slot: the stage's forward and backward (3 forwards) on 2 cores, and
  // for stage 0 its output sent and its gradient received.
  Layout l;
  l.mesh = {1, 2, 1};
  l.micro_batches = 4;
  const Prediction p = CostModel(request(c, 2), prof).predict(l);
  ASSERT_EQ(p.rejected, "");
  planner::PlanningComm one(1);
  const std::vector<std::size_t> cut = planner::stage_layers(request(c, 2), one, 2, false).bounds;
  const double outs[] = {200, 200, 10};  // each layer's output values per sample
  double slot[2] = {0, 0};
  for (int s = 0; s < 2; ++s) {
    for (std::size_t i = cut[s]; i < cut[s + 1]; ++i) {
      const double f = flops[i] * 16;
      slot[s] += 3 * ((f + 1e6) / (1e10 * 2) + 2 * values[i] * 16 * 4 / 5e9 + 1e-6);
    }
    if (s == 0) slot[s] += 2 * (1e-6 + outs[cut[1] - 1] * 16 * 4 / 1e9);
  }
  const double slowest = std::max(slot[0], slot[1]), other = std::min(slot[0], slot[1]);
  EXPECT_NEAR(p.compute + p.pipeline_comm, 4 * slowest, 1e-12 * slowest);
  EXPECT_NEAR(p.bubble, other, 1e-12 * other);
  EXPECT_NEAR(p.step, 4 * slowest + other + p.optimizer, 1e-12 * p.step);
  EXPECT_EQ(CostModel::allreduce_time(8e6, 4, {1e-6, 1e9}), 2.0 * 3 * (1e-6 + 8e6 / 4e9));
}

// Buckets of 25 MiB from the end: layer 1 (one bucket's worth) is sent while
// layer 0's backward runs; layer 0's two buckets follow its backward, one
// after the other. a: one bucket's allreduce over 2 ranks.
TEST(PlannerTime, BucketsStartWhenBackwardHasWrittenThem) {
  const double cap = double(GradSyncOptions{}.bucket_bytes / sizeof(float));
  const planner::Link link{0.0, 1e10};
  const double a = CostModel::allreduce_time(cap * 4, 2, link);
  for (double b : {2 * a, a / 2}) {  // layer 0's backward longer, then shorter, than a bucket
    // Layer 1's bucket runs from b to b + a; layer 0's start at max(b + a, 2 b)
    // and take 2 a; backward ends at 2 b.
    const double expected = std::max(b + a, 2 * b) + 2 * a - 2 * b;
    EXPECT_NEAR(CostModel::exposed_bucket_time({2 * cap, cap}, {b, b}, 2, link), expected,
                1e-12 * expected) << "backward " << b << " s per layer";
  }
  // One layer's worth less than a bucket: one allreduce, after all of backward.
  // (computed as (2 s + a) - 2 s: a's rounding at 2 s, 4.4e-16 s, is the tolerance)
  EXPECT_NEAR(CostModel::exposed_bucket_time({10, 20}, {1, 1}, 2, link),
              CostModel::allreduce_time(120, 2, link), 4.5e-16);
  EXPECT_EQ(CostModel::exposed_bucket_time({10, 20}, {1, 1}, 1, link), 0.0);
}

// ZeRO-1 of a model of one unit (under 25 MiB): its reduce-scatter (half an
// allreduce) starts when backward ends and the allgather (the other half)
// follows, neither hidden: an allreduce's time (to the rounding of the
// subtraction in exposed_bucket_time, 1e-12 relative). ZeRO-2 with 2
// micro-batches adds the first micro-batch's reduce-scatter; ZeRO-3 gathers
// each unit before forward and backward instead of the allgather: whole on
// a CPU node, hidden behind this model's compute on GPUs. A measured update
// rate replaces memory bandwidth in the optimizer's term.
TEST(PlannerTime, ZeroSumsAfterBackward) {
  test::DpConfig c;
  c.widths = {100, 200, 10};
  c.batch = 64;
  c.optimizer = {OptimizerKind::sgd, 0.1};
  const CostModel model(request(c, 2), cpu_profile());
  Layout l;
  l.mesh = {2, 1, 1};
  l.zero = 1;
  const Prediction p = model.predict(l);
  ASSERT_EQ(p.rejected, "");
  const double params = 100 * 200 + 200 + 200 * 10 + 10;
  const double ar = CostModel::allreduce_time(params * 4, 2, cpu_profile().intra_node);
  EXPECT_NEAR(p.data_comm, ar, 1e-12 * ar);
  // A calibrated reduce-scatter + allgather replaces the allreduce's link.
  MachineProfile calibrated = cpu_profile();
  calibrated.reduce_scatter_allgather = {3e-6, 2e8};
  const double cal = CostModel::allreduce_time(params * 4, 2, calibrated.reduce_scatter_allgather);
  EXPECT_NEAR(CostModel(request(c, 2), calibrated).predict(l).data_comm, cal, 1e-12 * cal);
  Layout two = l;
  two.zero = 2;
  two.micro_batches = 2;
  const Prediction p2 = model.predict(two);
  ASSERT_EQ(p2.rejected, "");
  EXPECT_NEAR(p2.data_comm, 1.5 * ar, 1e-12 * ar);
  Layout three = l;
  three.zero = 3;
  const Prediction p3 = model.predict(three);
  ASSERT_EQ(p3.rejected, "");
  // On a CPU node the gathers (copies by the cores that compute) count whole.
  EXPECT_NEAR(p3.data_comm, 0.5 * ar + ar, 1e-12 * ar);
  // Synchronizations per step: one bucket; its reduce-scatter and
  // allgather; per micro-batch a reduce-scatter, and the last's allgather;
  // a gather before forward and backward and a reduce-scatter of each of
  // the 2 Linears.
  EXPECT_EQ(p.collectives, 2);
  EXPECT_EQ(p2.collectives, 3);
  EXPECT_EQ(p3.collectives, 6);
  EXPECT_EQ(p3.optimizer, p.optimizer);  // the same shard updated
  // On GPUs they hide behind the compute; here it is longer than them.
  MachineProfile gpu = cpu_profile();
  gpu.gpu = true;
  gpu.devices_per_node = 2;
  const Prediction g3 = CostModel(request(c, 2), gpu).predict(three);
  ASSERT_EQ(g3.rejected, "");
  ASSERT_GT(g3.compute, ar);
  EXPECT_NEAR(g3.data_comm, 0.5 * ar, 1e-12 * ar);
  l.zero = 0;
  EXPECT_NEAR(model.predict(l).optimizer, 2 * p.optimizer, 1e-12 * p.optimizer);  // half the update
  EXPECT_EQ(model.predict(l).collectives, 1);
  // A measured update rate replaces memory bandwidth: 3 values of 4 bytes
  // per parameter (SGD: weight and gradient read, weight written).
  MachineProfile updated = cpu_profile();
  updated.measured_updates.push_back({OptimizerKind::sgd, 2, 2, 5e9});
  updated.measured_updates.push_back({OptimizerKind::sgd, 1, 2, 1.0});    // other threads: not this
  updated.measured_updates.push_back({OptimizerKind::adamw, 2, 2, 1.0});  // another optimizer: not this
  EXPECT_NEAR(CostModel(request(c, 2), updated).predict(l).optimizer, params * 12 / 5e9, 1e-12);
}

// The keys of a model's top-level layers on a tensor group of tp, as the
// cost model and the calibration name them.
std::vector<std::string> layer_keys(const PlanRequest& r, int tp) {
  planner::PlanningComm comm(tp);
  planner::StageLayers all = planner::stage_layers(r, comm, 1, false);
  Sequential<float> s = Sequential<float>::stage(all.input, 0);
  for (std::size_t i = 0; i < all.layers.size(); ++i) s.add(std::move(all.layers[i]), all.names[i]);
  std::vector<std::string> keys;
  for (std::size_t i = 0; i < s.num_layers(); ++i) keys.push_back(planner::layer_key(s.layer(i), tp, false));
  return keys;
}

// A top-level layer the profile measured on the micro-batch costs those
// times instead of the rate curve's; on a tensor group its sums are inside
// them (no tensor term of its own); other threads or samples do not count.
TEST(PlannerTime, MeasuredLayersReplaceTheRateCurve) {
  test::DpConfig c;
  c.widths = {100, 200, 10};
  c.batch = 64;
  c.optimizer = {OptimizerKind::sgd, 0.1};
  MachineProfile prof = cpu_profile();
  Layout one;
  one.mesh = {1, 1, 1};
  const Prediction before = CostModel(request(c, 1), prof).predict(one);
  const std::vector<std::string> keys = layer_keys(request(c, 1), 1);
  ASSERT_EQ(keys.size(), 3u);  // Linear(100, 200), ReLU, Linear(200, 10)
  EXPECT_EQ(keys[0], "Linear(100, 200) in {100} tp 1");
  // Linear(100, 200) on 64 rows, 4 threads (the whole 4-core node): the curve
  // gives (f + f_half) / R + 2 (in + out) 4 B / bw + launch forward, twice that backward.
  const double curve = (2.0 * 64 * 100 * 200 + 1e6) / (1e10 * 4) + 2.0 * 300 * 64 * 4 / 1e10 + 1e-6;
  prof.measured_layers.push_back({keys[0], 64, 4, 1, 1e-3, 3e-3});
  prof.measured_layers.push_back({keys[0], 64, 2, 1, 9.0, 9.0});  // other threads: not this
  prof.measured_layers.push_back({keys[0], 32, 4, 1, 9.0, 9.0});  // other samples: not this
  const Prediction after = CostModel(request(c, 1), prof).predict(one);
  const double expected = before.compute + (1e-3 - curve) + (3e-3 - 2 * curve);
  EXPECT_NEAR(after.compute, expected, 1e-12 * expected);
  // JSON keeps them, and reads them back.
  const MachineProfile back = planner::parse_profile(planner::profile_json(prof), "profile.json");
  ASSERT_EQ(back.measured_layers.size(), 3u);
  EXPECT_EQ(back.measured_layers[0].layer, keys[0]);
  EXPECT_EQ(back.measured_layers[1].threads, 2);
  EXPECT_EQ(back.measured_layers[2].samples, 32u);

  // tp 2 on 2 ranks of 2 threads: every layer measured, so the step's
  // compute is their sum and no tensor-parallel sum is charged apart.
  Layout tp;
  tp.mesh = {1, 1, 2};
  const CostModel two(request(c, 2), cpu_profile());
  EXPECT_GT(two.predict(tp).tensor_comm, 0);
  MachineProfile timed = cpu_profile();
  double sum = 0;
  for (const std::string& k : layer_keys(request(c, 2), 2)) {
    timed.measured_layers.push_back({k, 64, 2, 2, 1e-3, 2e-3});
    sum += 3e-3;
  }
  const Prediction p = CostModel(request(c, 2), timed).predict(tp);
  EXPECT_EQ(p.tensor_comm, 0);
  EXPECT_NEAR(p.compute, sum, 1e-12 * sum);
}

// A measured step of the model adds what it took beyond the prediction of
// its layout (plain data parallelism over the ranks) to every layout of that
// many ranks, by hand: the data-parallel layout then predicts the measured
// step itself. Steps of another batch, thread count, rank count or model add
// nothing; JSON keeps them; a bad entry is named.
TEST(PlannerTime, MeasuredStepsAddTheOtherWorkToEveryLayoutOfTheirRanks) {
  test::DpConfig c;
  c.widths = {100, 200, 10};
  c.batch = 64;
  c.optimizer = {OptimizerKind::sgd, 0.1};
  const PlanRequest req = request(c, 2);
  Layout dp, tp;
  dp.mesh = {2, 1, 1};
  tp.mesh = {1, 1, 2};
  const CostModel plain(req, cpu_profile());
  EXPECT_EQ(plain.data_parallel_layout().str(), dp.str());
  const Prediction dp0 = plain.predict(dp), tp0 = plain.predict(tp);
  ASSERT_TRUE(dp0.rejected.empty() && tp0.rejected.empty());
  EXPECT_EQ(dp0.other, 0);
  const std::string key = planner::model_key(req);
  EXPECT_NE(key.find("3 layers, 22210 parameters, cross-entropy, fp32, fnv "), std::string::npos) << key;
  test::DpConfig wider = c;
  wider.widths = {100, 201, 10};
  EXPECT_NE(key, planner::model_key(request(wider, 2)));
  MachineProfile prof = cpu_profile();
  const double extra = 5e-3;
  // 4 cores, 2 ranks: 2 threads each.
  prof.measured_steps.push_back({key, 64, OptimizerKind::sgd, 2, 2, dp0.step + extra});
  prof.measured_steps.push_back({key, 32, OptimizerKind::sgd, 2, 2, 9.0});  // another batch
  prof.measured_steps.push_back({key, 64, OptimizerKind::sgd, 4, 1, 9.0});  // one rank
  prof.measured_steps.push_back({"another model", 64, OptimizerKind::sgd, 2, 2, 9.0});
  const CostModel timed(req, prof);
  const Prediction dp1 = timed.predict(dp), tp1 = timed.predict(tp);
  EXPECT_NEAR(dp1.other, extra, 1e-12);
  EXPECT_NEAR(dp1.step, dp0.step + extra, 1e-12);
  EXPECT_NEAR(dp1.samples_per_s, 64 / (dp0.step + extra), 1e-9 * dp1.samples_per_s);
  EXPECT_NEAR(tp1.other, extra, 1e-12);
  EXPECT_NEAR(tp1.step, tp0.step + extra, 1e-12);
  EXPECT_EQ(tp1.compute, tp0.compute);
  // A measured step far below the prediction: at most half of it taken off.
  MachineProfile fast = cpu_profile();
  fast.measured_steps.push_back({key, 64, OptimizerKind::sgd, 2, 2, 0.1 * dp0.step});
  EXPECT_NEAR(CostModel(req, fast).predict(dp).step, 0.5 * dp0.step, 1e-12);
  // JSON keeps them, and reads them back; a bad optimizer is named.
  const MachineProfile back = planner::parse_profile(planner::profile_json(prof), "profile.json");
  ASSERT_EQ(back.measured_steps.size(), 4u);
  EXPECT_EQ(back.measured_steps[0].model, key);
  EXPECT_EQ(back.measured_steps[1].batch, 32u);
  EXPECT_EQ(back.measured_steps[2].threads, 4);
  EXPECT_EQ(back.measured_steps[0].step, dp0.step + extra);
  std::string bad = planner::profile_json(prof);
  bad.replace(bad.find("\"sgd\""), 5, "\"lamb\"");
  try {
    planner::parse_profile(bad, "bad.json");
    ADD_FAILURE() << "a bad optimizer was read";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("bad.json: measured_steps[0].optimizer"), std::string::npos) << e.message();
  }
}

// Calibration times every layer of every stage set the search tries, under
// the keys the cost model looks up: after measure_layers each layout's
// compute is the sum of measured times (their median of repetitions, so
// positive), nothing left to the rate curve. A profile with the GEMMs of an
// older calibrate is refused by name.
TEST(PlannerCalibrate, MeasuredLayersCoverEveryLayoutOfTheSearch) {
  if (!thread_ranks_unavailable().empty()) GTEST_SKIP() << thread_ranks_unavailable();
  test::DpConfig c;
  c.widths = {16, 32, 4};
  c.batch = 8;
  c.optimizer = {OptimizerKind::sgd, 0.1};
  MachineProfile prof = cpu_profile();
  prof.devices_per_node = std::max(1, Context().threads);
  const CostModel model(request(c, 2), prof);
  const auto sets = planner::stage_sets(model, 2, c.batch);
  planner::measure_layers(prof, model.request(), sets, 2, [](const std::string&) {});
  ASSERT_FALSE(prof.measured_layers.empty());
  std::set<std::tuple<std::string, std::size_t>> seen;
  for (const auto& m : prof.measured_layers) {
    EXPECT_GT(m.forward, 0) << m.layer;
    EXPECT_GT(m.backward, 0) << m.layer;
    EXPECT_EQ(m.ranks, 2);
    EXPECT_TRUE(seen.insert({m.layer, m.samples}).second) << m.layer << " timed twice";
  }
  const CostModel timed(request(c, 2), prof);
  for (const Layout& l : planner::layouts(2, c.batch)) {
    const Prediction p = timed.predict(l);
    if (!p.rejected.empty()) continue;
    // What the measured layers give, micro-batch by micro-batch: M + pp - 1
    // slots of the slowest stage; here every stage's layers are measured,
    // so compute / M is at least one stage's measured sum and tp adds nothing.
    EXPECT_EQ(p.tensor_comm, 0) << l.str();
    double all = 0;
    const std::size_t m = timed.micro_batch_samples(l);
    const std::vector<std::string> keys = layer_keys(request(c, 2), l.mesh.tp);
    for (const std::string& k : keys) {
      const auto* x = prof.measured(k, m, std::max(1, prof.devices_per_node / 2), 2);
      ASSERT_NE(x, nullptr) << k << " on " << m << " samples (" << l.str() << ")";
      all += x->forward + x->backward;  // (no block here: recomputation adds nothing)
    }
    if (l.mesh.pp == 1) EXPECT_NEAR(p.compute, all * static_cast<double>(l.micro_batches), 1e-9 * all) << l.str();
  }
  // A whole step as strata-train runs it (dp 2 on thread ranks): the
  // prediction of that layout is then the measured step.
  planner::measure_step(prof, model.request(), [](const std::string&) {});
  ASSERT_EQ(prof.measured_steps.size(), 1u);
  const planner::MeasuredStep& step = prof.measured_steps[0];
  EXPECT_GT(step.step, 0);
  EXPECT_EQ(step.ranks, 2);
  EXPECT_EQ(step.batch, c.batch);
  const CostModel stepped(request(c, 2), prof);
  EXPECT_NEAR(stepped.predict(stepped.data_parallel_layout()).step, std::max(step.step, 0.5 * timed.predict(timed.data_parallel_layout()).step), 1e-12);
  std::string old = planner::profile_json(cpu_profile());
  old.insert(old.rfind('}'), ", \"measured_gemms\": []");
  try {
    planner::parse_profile(old, "old.json");
    ADD_FAILURE() << "an old profile was read";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("measured_gemms"), std::string::npos) << e.message();
  }
}

// Where plain data parallelism cannot run (a batch of one on two ranks), the
// model's calibration measures its layers and update but no step, and says
// why; the plans then go without the other work.
TEST(PlannerCalibrate, NoStepWherePlainDataParallelismCannotRun) {
  if (!thread_ranks_unavailable().empty()) GTEST_SKIP() << thread_ranks_unavailable();
  test::DpConfig c;
  c.widths = {16, 32, 4};
  c.batch = 1;
  c.optimizer = {OptimizerKind::sgd, 0.1};
  MachineProfile prof = cpu_profile();
  prof.devices_per_node = std::max(1, Context().threads);
  std::string said;
  planner::measure_model(prof, request(c, 2), [&](const std::string& line) { said += line + "\n"; });
  EXPECT_FALSE(prof.measured_layers.empty());
  EXPECT_TRUE(prof.measured_steps.empty());
  EXPECT_NE(said.find("training steps: not measured (dp 2 x pp 1 x tp 1: a batch of 1 gives some of the 2"),
            std::string::npos) << said;
  Layout tp;
  tp.mesh = {1, 1, 2};
  EXPECT_EQ(CostModel(request(c, 2), prof).predict(tp).other, 0);
}

// Every layout of the rank count is there, ranked; the rejected ones say why.
TEST(PlannerSearch, RanksEveryLayoutAndNamesWhyOthersFail) {
  test::DpConfig gpt = test::gpt_config(true, 2, 12);
  gpt.batch = 6;
  const CostModel model(request(gpt, 8), cpu_profile());
  // ranks_per_node defaults to all 8 on a CPU profile of 4 cores: 1 thread each at least.
  const auto plans = planner::search(model, 8, 6);
  ASSERT_FALSE(plans.empty());
  EXPECT_EQ(plans.front().rejected, "");
  bool batch_reason = false, tp_reason = false;
  // The fastest first; those within 2% of it (a tie) by fewest
  // synchronizations, then the rest by speed.
  const double best = std::max_element(plans.begin(), plans.end(), [](const Prediction& a, const Prediction& b) {
                        return a.samples_per_s < b.samples_per_s;
                      })->samples_per_s;
  std::size_t tied = 0;
  while (tied < plans.size() && plans[tied].rejected.empty() && plans[tied].samples_per_s >= 0.98 * best) ++tied;
  ASSERT_GE(tied, 2u);  // this model's layouts do tie
  for (std::size_t i = 0; i < plans.size(); ++i) {
    EXPECT_EQ(plans[i].layout.mesh.size(), 8);
    if (i > 0 && i < tied) EXPECT_GE(plans[i].collectives, plans[i - 1].collectives) << i;
    if (i > tied && plans[i].rejected.empty()) EXPECT_LE(plans[i].samples_per_s, plans[i - 1].samples_per_s);
    if (i >= tied && plans[i].rejected.empty()) EXPECT_LT(plans[i].samples_per_s, 0.98 * best);
    if (i > 0 && !plans[i - 1].rejected.empty()) EXPECT_NE(plans[i].rejected, "") << "fitting after rejected";
    batch_reason |= plans[i].rejected.find("gives some of the 8 data-parallel ranks no sample") != std::string::npos;
    tp_reason |= plans[i].rejected.find("does not divide") != std::string::npos;
  }
  EXPECT_TRUE(batch_reason);
  EXPECT_TRUE(tp_reason);
  // A budget no layout meets: every layout rejected, naming its memory.
  PlanRequest tight = request(gpt, 8);
  tight.memory_budget = 1024;
  for (const auto& p : planner::search(CostModel(tight, cpu_profile()), 8, 6))
    EXPECT_NE(p.rejected, "") << p.layout.str();
}

// 4096 GPUs of the A100 profile for gpt-small: a plan that fits (how long
// it takes strata-plan prints; no timed test).
TEST(PlannerSearch, PlansFourThousandRanks) {
  PlanRequest r;
  r.model = read_model_file(std::string(STRATA_SOURCE_DIR) + "/models/gpt-small.toml");
  r.batch = 1024;
  r.ranks = 4096;
  r.precision = Precision::bf16;
  r.optimizer = {OptimizerKind::adam, 1e-4};
  const CostModel model(r, planner::load_profile(profile_path("dgx-a100.json")));
  const auto plans = planner::search(model, 4096, 1024);
  ASSERT_FALSE(plans.empty());
  EXPECT_EQ(plans.front().rejected, "");
  EXPECT_EQ(plans.front().layout.mesh.size(), 4096);
}

}  // namespace
}  // namespace strata
