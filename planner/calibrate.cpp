#include "planner/calibrate.hpp"

#include "backends/clock.hpp"
#include "backends/context.hpp"
#include "backends/error.hpp"
#include "backends/launch.hpp"
#include "backends/ranks.hpp"
#include "layers/optimizer.hpp"
#include "layers/registry.hpp"
#include "layers/sequential.hpp"
#include "planner/layer_probe.hpp"
#include "planner/planning_comm.hpp"
#include "strategies/engine.hpp"
#include "training/synthetic_data.hpp"
#include "training/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <vector>

namespace strata::planner {

CalibrationFit fit_rate(const std::vector<double>& x, const std::vector<double>& t) {
  STRATA_REQUIRE(x.size() == t.size() && x.size() >= 2, config,
                 "calibration: a fit needs two points or more");
  // Minimise sum (a x + b - t)^2 / t: the relative error of each point
  // weighted by its time (a step's time is mostly its large GEMMs).
  double sw = 0, sx = 0, st = 0, sxx = 0, sxt = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double w = 1.0 / t[i];
    sw += w, sx += w * x[i], st += w * t[i], sxx += w * x[i] * x[i], sxt += w * x[i] * t[i];
  }
  const double det = sw * sxx - sx * sx;
  STRATA_REQUIRE(det > 0, config, "calibration: the points of a fit have one x only");
  const double a = (sw * sxt - sx * st) / det, b = (sxx * st - sx * sxt) / det;
  STRATA_REQUIRE(a > 0, runtime, "calibration: times do not grow with size (a noisy machine?)");
  return {1.0 / a, std::max(0.0, b) / a};
}

namespace {

// The median over 5 repetitions of the time of f, each repetition calling it
// often enough for `least` seconds.
template <class F>
double time_of(const F& f, double least = 0.02) {
  f();  // warm
  int calls = 1;
  for (;;) {
    const auto t0 = Clock::now();
    for (int i = 0; i < calls; ++i) f();
    if (seconds_since(t0) >= least || calls >= (1 << 20)) break;
    calls *= 2;
  }
  std::vector<double> reps;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < calls; ++i) f();
    reps.push_back(seconds_since(t0) / calls);
  }
  std::sort(reps.begin(), reps.end());
  return reps[2];
}

// Kernels of the measurements (free functions: nvcc takes no device lambda
// inside another lambda).
void scale_copy(const ExecSpace& exec, VectorBuffer<float> x, VectorBuffer<float> y) {
  Kokkos::parallel_for("strata::calibrate::copy", Range(exec, 0, x.extent(0)),
                       KOKKOS_LAMBDA(const std::size_t i) { y(i) = 2.0f * x(i); });
  exec.fence();
}

void empty_kernel(const ExecSpace& exec, VectorBuffer<float> x) {
  Kokkos::parallel_for("strata::calibrate::launch", Range(exec, 0, x.extent(0)),
                       KOKKOS_LAMBDA(const std::size_t i) { x(i) = 0.0f; });
  exec.fence();
}

std::string g(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}
}  // namespace

double node_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kib = 0;
  while (in >> key) {
    if (key == "MemTotal:") {
      in >> kib;
      break;
    }
    std::string rest;
    std::getline(in, rest);
  }
  STRATA_REQUIRE(kib > 0, runtime, "cannot read this node's memory (MemTotal in /proc/meminfo)");
  return kib * 1024;
}

namespace {
// A collective the link calibration times: its name in the log, and the call
// on a rank's buffer.
struct TimedCollective {
  std::string what;
  std::function<void(comm::Communicator&, std::vector<float>&)> run;
};

// Times each collective on two thread ranks for each size (bytes), the
// collectives interleaved within each repetition so that a slow phase of the
// machine falls on all of them alike (their ratio is what the cost model
// uses), and fits t = 2 latency + bytes / bandwidth (a ring of two) to each.
// Both ranks run the same number of calls: rank 0's count, agreed through
// the communicator (two ranks that chose their counts apart would leave one
// waiting for a partner).
std::vector<Link> fit_links(const std::vector<double>& bytes, int threads,
                            const std::function<void(const std::string&)>& log,
                            const std::vector<TimedCollective>& collectives) {
  const std::size_t n = collectives.size();
  std::vector<std::vector<double>> times(n);
  for (const double b : bytes) {
    std::vector<double> median(n, 0);
    run_ranks(2, threads, [&](Context&, comm::Communicator& comm) {
      std::vector<float> buf(static_cast<std::size_t>(b) / sizeof(float), 1.0f);
      for (const auto& c : collectives) c.run(comm, buf);  // warm
      // Calls per repetition: enough for 20 ms of the slowest collective.
      std::int32_t calls = 1;
      for (;;) {
        const auto t0 = Clock::now();
        for (std::int32_t i = 0; i < calls; ++i)
          for (const auto& c : collectives) c.run(comm, buf);
        std::int32_t more = seconds_since(t0) < 0.02 * static_cast<double>(n) && calls < (1 << 20);
        comm.broadcast(&more, 1, comm::DataType::i32, 0);
        if (!more) break;
        calls *= 2;
      }
      std::vector<std::vector<double>> reps(n);
      for (int r = 0; r < 5; ++r)
        for (std::size_t k = 0; k < n; ++k) {
          comm.barrier();
          const auto t0 = Clock::now();
          for (std::int32_t i = 0; i < calls; ++i) collectives[k].run(comm, buf);
          reps[k].push_back(seconds_since(t0) / calls);
        }
      if (comm.rank() == 0)
        for (std::size_t k = 0; k < n; ++k) {
          std::sort(reps[k].begin(), reps[k].end());
          median[k] = reps[k][2];
        }
    });
    for (std::size_t k = 0; k < n; ++k) {
      times[k].push_back(median[k]);
      log(collectives[k].what + " " + std::to_string(static_cast<std::size_t>(b) / 1024) +
          " KiB, 2 thread ranks: " + g(median[k] * 1e6) + " us");
    }
  }
  std::vector<Link> links;
  for (std::size_t k = 0; k < n; ++k) {
    const CalibrationFit fit = fit_rate(bytes, times[k]);
    links.push_back({fit.offset / fit.rate / 2, fit.rate});
    log(collectives[k].what + " fit: latency " + g(links.back().latency * 1e6) + " us, bandwidth " +
        g(links.back().bandwidth / 1e9) + " GB/s");
  }
  return links;
}
}  // namespace

MachineProfile calibrate(const std::function<void(const std::string&)>& log) {
  MachineProfile p;
  p.gpu = !host_kernels;
  STRATA_REQUIRE(host_kernels, config, "strata-plan calibrate measures host (CPU) machines; "
                 "write a GPU cluster's profile by hand (planner/profiles/)");
  Context ctx;
  const int cores = std::max(1, ctx.threads);
  p.name = "calibrated host (" + std::to_string(cores) + " cores)";
  p.nodes = 1;
  p.devices_per_node = cores;
  p.memory_per_node = node_memory();

  // GEMM rate: x W^T shapes of layers, every thread.
  std::vector<double> flops, times;
  for (int rows : {32, 128, 512})
    for (int width : {128, 512, 2048}) {
      VectorBuffer<float> a("a", std::size_t(rows) * width), w("w", std::size_t(width) * width),
          y("y", std::size_t(rows) * width);
      Kokkos::deep_copy(a, 0.5f);
      Kokkos::deep_copy(w, 0.25f);
      const double t = time_of([&] {
        ctx.blas.gemm(Op::N, Op::T, rows, width, width, 1.0f, a.data(), width, w.data(), width,
                      0.0f, y.data(), width);
        ctx.exec.fence();
      });
      flops.push_back(2.0 * rows * width * width);
      times.push_back(t);
      log("gemm " + std::to_string(rows) + " x " + std::to_string(width) + " x " +
          std::to_string(width) + ": " + g(flops.back() / t / 1e9) + " GFLOP/s");
    }
  const CalibrationFit gemm = fit_rate(flops, times);
  p.gemm_flops_fp32 = gemm.rate / cores;
  p.gemm_flops_16 = p.gemm_flops_fp32;  // host GEMMs compute 16-bit storage in float
  p.gemm_half_flops = std::max(gemm.offset, 1.0);
  log("gemm fit: " + g(gemm.rate / 1e9) + " GFLOP/s on " + std::to_string(cores) +
      " cores, half of it at " + g(gemm.offset / 1e6) + " MFLOP");

  // Memory bandwidth: y = 2 x over 256 MiB arrays (read one, write one).
  {
    const std::size_t n = std::size_t(64) << 20;
    VectorBuffer<float> x("x", n), y("y", n);
    Kokkos::deep_copy(x, 1.0f);
    const double t = time_of([&] { scale_copy(ctx.exec, x, y); }, 0.1);
    p.memory_bandwidth = 2.0 * n * sizeof(float) / t;
    log("memory bandwidth: " + g(p.memory_bandwidth / 1e9) + " GB/s");
  }
  // Launch: an empty kernel over the pool.
  {
    VectorBuffer<float> x("x", std::size_t(cores));
    p.launch = time_of([&] { empty_kernel(ctx.exec, x); });
    log("kernel launch: " + g(p.launch * 1e6) + " us");
  }
  // The link between two thread ranks: allreduce of 4 KiB to 64 MiB. The
  // large sizes do not fit in a cache, as a model's gradients do not. Then
  // ZeRO-1's sums at the same sizes: a reduce-scatter and an allgather, in place.
  if (thread_ranks_unavailable().empty() && cores >= 2) {
    std::vector<double> bytes;
    for (std::size_t kib = 4; kib <= 65536; kib *= 4) bytes.push_back(static_cast<double>(kib) * 1024);
    const int threads = std::max(1, cores / 2);
    const std::vector<Link> links = fit_links(
        bytes, threads, log,
        {{"allreduce",
          [](comm::Communicator& comm, std::vector<float>& buf) {
            comm.allreduce(buf.data(), buf.data(), buf.size(), comm::DataType::f32,
                           comm::ReduceOp::sum);
          }},
         {"reduce-scatter + allgather (ZeRO-1)",
          [](comm::Communicator& comm, std::vector<float>& buf) {
            const std::size_t half = buf.size() / 2;
            float* mine = buf.data() + half * static_cast<std::size_t>(comm.rank());
            comm.reduce_scatter(buf.data(), mine, half, comm::DataType::f32, comm::ReduceOp::sum);
            comm.allgather(mine, buf.data(), half, comm::DataType::f32);
          }}});
    p.intra_node = links[0];
    p.reduce_scatter_allgather = links[1];
  } else {
    p.intra_node = {5e-6, 5e9};
    log("link: no thread ranks here (" + thread_ranks_unavailable() +
        "); a placeholder of 5 us and 5 GB/s");
  }
  p.inter_node = p.intra_node;
  p.source = "strata-plan calibrate (one node; inter_node copies the thread ranks' link)";
  return p;
}

namespace {
// The median seconds of f over 5 repetitions on every rank at once. Rank 0
// picks the calls per repetition (enough for `least` seconds) for all, so
// that a layer that sums over its tensor group makes the same calls on
// every rank.
double time_together(comm::Communicator& comm, const std::function<void()>& f, double least) {
  f();  // warm
  std::int32_t calls = 1;
  for (;;) {
    comm.barrier();
    const auto t0 = Clock::now();
    for (std::int32_t i = 0; i < calls; ++i) f();
    std::int32_t more = seconds_since(t0) < least && calls < (1 << 20);
    comm.broadcast(&more, 1, comm::DataType::i32, 0);
    if (!more) break;
    calls *= 2;
  }
  std::vector<double> reps;
  for (int r = 0; r < 5; ++r) {
    comm.barrier();
    const auto t0 = Clock::now();
    for (std::int32_t i = 0; i < calls; ++i) f();
    reps.push_back(seconds_since(t0) / calls);
  }
  std::sort(reps.begin(), reps.end());
  return reps[2];
}
}  // namespace

void measure_layers(MachineProfile& p, const PlanRequest& request, const std::vector<StageSet>& sets,
                    int ranks, const std::function<void(const std::string&)>& log) {
  STRATA_REQUIRE(ranks >= 1, config, "calibration: ranks must be positive");
  STRATA_REQUIRE(ranks == 1 || thread_ranks_unavailable().empty(), config,
                 "calibration: no thread ranks here (", thread_ranks_unavailable(), ")");
  const int cores = std::max(1, Context().threads);
  const int threads = std::max(1, cores / ranks);
  const auto t0 = Clock::now();
  std::size_t done = 0, timed = 0;
  std::set<std::string> reasons;  // each logged once
  for (const StageSet& set : sets) {
    std::vector<MeasuredLayer> found;  // rank 0's
    std::string skipped;
    run_ranks(ranks, threads, [&](Context& ctx, comm::Communicator& comm) {
      // This rank's tensor group: ranks r / tp of the set's mesh.
      PlanningComm alone(1);
      std::unique_ptr<comm::Communicator> group;
      comm::Communicator* tp = &alone;
      if (set.tp > 1) {
        group = comm.split(comm.rank() / set.tp, comm.rank());
        tp = group.get();
      }
      StageLayers all;
      try {
        all = stage_layers(request, *tp, 1, set.sequence);
      } catch (const Error& e) {
        if (comm.rank() == 0) skipped = e.message();
        return;
      }
      // Each top-level layer alone in a stage of its own (a rank holds one
      // layer's parameters at a time), unless measured before.
      std::set<std::string> mine;
      Shape input = all.input;
      for (std::size_t i = 0; i < all.layers.size(); ++i) {
        Sequential<float> one = Sequential<float>::stage(input, i);
        input = all.layers[i]->output_shape(input);
        one.add(std::move(all.layers[i]), all.names[i]);
        Layer<float>& l = one.layer(0);
        const std::string key = layer_key(l, set.tp, set.sequence);
        const MeasuredLayer* before = p.measured(key, set.samples, threads, ranks);
        if ((before && before->ranks == ranks) || !mine.insert(key).second) continue;
        one.build(set.samples);
        one.init(Init::kaiming_uniform, 1);
        one.set_training(true);
        LayerProbe probe(l, set.samples, static_cast<unsigned>(i));
        const double f = time_together(
            comm, [&] { l.forward(ctx, probe.x, probe.y, probe.saved); ctx.exec.fence(); }, 0.02);
        // The model's first layer computes no input gradient.
        const Matrix<float> dx = i == 0 ? Matrix<float>() : Matrix<float>(probe.dx);
        const double b = time_together(
            comm, [&] { l.backward(ctx, probe.dy, dx, probe.saved); ctx.exec.fence(); }, 0.02);
        if (comm.rank() == 0) found.push_back({key, set.samples, threads, ranks, f, b});
      }
    });
    timed += found.size();
    p.measured_layers.insert(p.measured_layers.end(), found.begin(), found.end());
    if (!skipped.empty() && reasons.insert(skipped).second)
      log("layers of tp " + std::to_string(set.tp) +
          (set.sequence ? " with sequence parallelism" : "") + ": not measured (" + skipped + ")");
    if (++done % 10 == 0 || done == sets.size())
      log("model layers: " + std::to_string(done) + " of " + std::to_string(sets.size()) +
          " stage sets on " + std::to_string(ranks) + " rank(s) x " + std::to_string(threads) +
          " thread(s), " + std::to_string(timed) + " layers timed, " + g(seconds_since(t0)) + " s");
  }
}

void measure_update(MachineProfile& p, const PlanRequest& request, int ranks,
                    const std::function<void(const std::string&)>& log) {
  STRATA_REQUIRE(ranks == 1 || thread_ranks_unavailable().empty(), config,
                 "calibration: no thread ranks here (", thread_ranks_unavailable(), ")");
  PlanningComm alone(1);
  std::size_t n = 0;
  for (const auto& l : stage_layers(request, alone, 1, false).layers) n += l->num_params();
  if (n == 0) return;
  const int threads = std::max(1, std::max(1, Context().threads) / ranks);
  double seconds = 0;
  run_ranks(ranks, threads, [&](Context& ctx, comm::Communicator& comm) {
    Optimizer<float> opt(request.optimizer, n);
    VectorBuffer<float> weights("w", n), grads("g", n);
    Kokkos::deep_copy(weights, 0.5f);
    Kokkos::deep_copy(grads, 1e-3f);
    const double t = time_together(comm, [&] { opt.step(ctx, weights, grads); ctx.exec.fence(); }, 0.02);
    if (comm.rank() == 0) seconds = t;
  });
  const double state = static_cast<double>(state_elements(request.optimizer, 1));
  const double bytes = static_cast<double>(n) * (3 + 2 * state) * 4;
  p.measured_updates.push_back({request.optimizer.kind, threads, ranks, bytes / seconds});
  log(std::string("optimizer update (") + to_string(request.optimizer.kind) + ") of " +
      std::to_string(n) + " parameters on " + std::to_string(ranks) + " rank(s) at once: " +
      g(seconds * 1e3) + " ms, " + g(bytes / seconds / 1e9) + " GB/s per rank");
}

void measure_step(MachineProfile& p, const PlanRequest& request,
                  const std::function<void(const std::string&)>& log) {
  const int ranks = request.ranks;
  STRATA_REQUIRE(ranks == 1 || thread_ranks_unavailable().empty(), config,
                 "calibration: no thread ranks here (", thread_ranks_unavailable(), ")");
  STRATA_REQUIRE(request.precision == Precision::fp32, config,
                 "calibration: whole steps are measured in fp32 only, not ", to_string(request.precision));
  const CostModel model(request, p);
  const Prediction predicted = model.predict_parts(model.data_parallel_layout());
  STRATA_REQUIRE(predicted.rejected.empty(), config, "calibration: the step of ",
                 model.data_parallel_layout().str(), " cannot be measured: ", predicted.rejected);
  const std::string key = model_key(request);
  const int threads = model.threads_per_rank();
  // strata-train's warm-up (5 steps), then enough for about two seconds
  // (8 to 100 steps).
  const std::size_t timed = static_cast<std::size_t>(
      std::clamp(std::ceil(2.0 / std::max(predicted.step, 1e-6)), 8.0, 100.0));
  TrainerOptions t;
  t.batch = request.batch;
  t.warmup_steps = TrainerOptions{}.warmup_steps;
  t.steps = t.warmup_steps + timed;
  t.shuffle = false;
  t.evaluate = false;
  EngineOptions o;
  o.model = request.model;
  o.loss = request.loss;
  o.optimizer = request.optimizer;
  // The update's cost does not depend on the rate; a small one keeps random
  // labels from diverging.
  o.optimizer.lr = 1e-6;
  // A few distinct batches, drawn again each epoch (the ranks read them).
  data::Split data;
  data.train = synthetic_data(build_model<float>(request.model, 0), request.loss, request.batch * 4, 7);
  double samples_per_s = 0;
  run_ranks(ranks, threads, [&](Context& ctx, comm::Communicator& comm) {
    auto engine = make_engine(ctx, comm, o, request.batch);
    Trainer trainer(*engine, data, t, Position{}, comm.rank());
    const TrainResult r = trainer.fit({});
    if (comm.rank() == 0) samples_per_s = r.samples_per_sec;
  });
  STRATA_REQUIRE(samples_per_s > 0, runtime, "calibration: no step of ", key, " was timed");
  const double step = static_cast<double>(request.batch) / samples_per_s;
  // One entry per model, batch, optimizer and ranks: a new measurement replaces the old.
  auto& steps = p.measured_steps;
  steps.erase(std::remove_if(steps.begin(), steps.end(),
                             [&](const MeasuredStep& m) {
                               return m.model == key && m.batch == request.batch &&
                                      m.optimizer == request.optimizer.kind &&
                                      m.threads == threads && m.ranks == ranks;
                             }),
              steps.end());
  steps.push_back({key, request.batch, request.optimizer.kind, threads, ranks, step});
  log("training steps (" + model.data_parallel_layout().str() + ", batch " +
      std::to_string(request.batch) + ", " + std::to_string(timed) + " timed): " + g(step * 1e3) +
      " ms each, against " + g(predicted.step * 1e3) + " ms predicted from the parts");
}

void measure_model(MachineProfile& p, const PlanRequest& request,
                   const std::function<void(const std::string&)>& log) {
  const CostModel model(request, p);
  const int ranks = model.ranks_per_node();
  measure_layers(p, request, stage_sets(model, request.ranks, request.batch), ranks, log);
  if (p.update_bandwidth(request.optimizer.kind, model.threads_per_rank(), ranks) <= 0)
    measure_update(p, request, ranks, log);
  // Whole steps where the ranks are thread ranks of this node, in fp32, and
  // plain data parallelism runs (not where only ZeRO, a pipeline or tensor
  // parallelism fits, or the batch is smaller than the ranks).
  if (request.ranks != ranks || request.precision != Precision::fp32 ||
      p.measured_step(model_key(request), request.batch, request.optimizer.kind,
                      model.threads_per_rank(), request.ranks))
    return;
  const Prediction dp = CostModel(request, p).predict_parts(model.data_parallel_layout());
  if (!dp.rejected.empty()) {
    log("training steps: not measured (" + model.data_parallel_layout().str() + ": " + dp.rejected + ")");
    return;
  }
  measure_step(p, request, log);
}

}  // namespace strata::planner
