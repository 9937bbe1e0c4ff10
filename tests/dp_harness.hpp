// Training runs used by the data-parallel tests (thread ranks and MPI ranks):
// the same model, data and optimizer trained by the single-rank strategy and
// by DataParallel on any communicator, so results can be compared.
#pragma once

#include "data/dataset.hpp"
#include "data/loader.hpp"
#include "data/text.hpp"
#include "layers/mlp.hpp"
#include "strategies/data_parallel.hpp"
#include "strategies/local.hpp"
#include "strategies/model_parallel.hpp"
#include "test_utils.hpp"

#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace strata::test {

struct DpConfig {
  std::size_t samples = 60, features = 12, classes = 3;
  std::vector<std::size_t> widths{12, 16, 8, 3};
  std::size_t batch = 10;  // global
  std::size_t steps = 20;
  std::size_t micro = 1;   // micro-batches per step (gradient accumulation)
  OptimizerConfig optimizer{OptimizerKind::adam, 0.01};
  std::uint64_t seed = 7;
  double dropout = 0.0;
  // A model file's text (TOML, layers/model_spec.hpp) to train instead of
  // the MLP of widths, activation ReLU and dropout.
  std::string model;
  bool recompute = false;  // activation recomputation in every top-level block
  // Labels per sample (> 1: one per position, e.g. per token, of a model
  // whose output holds label_width positions of `classes` values).
  std::size_t label_width = 1;
  // Token windows (data::make_synthetic_tokens: `features` ids below
  // `classes` per sample and one label per position) instead of N(0, 1) rows.
  bool tokens = false;
  // The GEMM of every run: the portable kernel, where every element of C is
  // the dot product in the order of k whatever the GEMM's shape (on the host
  // and on a GPU). The runs compared here split a batch into other shapes
  // (micro-batches, data-parallel shards, tensor shards); a vendor BLAS picks
  // its kernel by shape, so the same sample's activations would differ by
  // a few ulps, which 16-bit rounding (one ulp of bf16 or fp16 where a value
  // crosses a rounding boundary) and Adam (whose step divides out a
  // gradient's size) amplify beyond any bound a test can state. Measured
  // with OpenBLAS, without inline GEMMs: fp16 losses 2.4e-4 apart after 5 of
  // 20 steps, an fp32 parameter 1.1e-5. The vendor GEMMs are tested against
  // the portable one in test_blas; here only the strategies' arithmetic
  // (the order of the gradient sums) differs between the runs compared.
  GemmBackend gemm = GemmBackend::portable;
};

// A run of the harness trains on a Context(c.gemm, ctx.exec) with the rest of
// ctx's settings, copied here.
inline void copy_settings(const Context& ctx, Context& run) {
  run.threads = ctx.threads;
  run.inline_ok = ctx.inline_ok;
  run.reproducible = ctx.reproducible;
  run.exact = ctx.exact;
  run.blas.set_reproducible(ctx.blas.reproducible());
}

// A GPT as the equivalence tests train it (DpConfig with tokens: 6 token ids
// below `vocab` (11) per sample): embeddings, two pre-norm blocks of causal
// attention (`heads` heads, 2) and a GELU MLP, with Dropout when `dropout`, a
// final LayerNorm and a head tied to the token embedding; 6 top-level layers.
inline std::string gpt_model(bool dropout = false, int heads = 2, int vocab = 11) {
  const std::string drop = dropout ? "\n    { type = \"dropout\", p = 0.2 }," : "";
  return R"(
input = [6]
[[layers]]
name = "wte"
type = "embedding"
vocab = )" + std::to_string(vocab) + R"(
dim = 8
[[layers]]
name = "wpe"
type = "position_embedding"
context = 8
[[layers]]
name = "h"
type = "block"
repeat = 2
layers = [
  { type = "residual", layers = [
    { type = "layernorm" },
    { type = "attention", heads = )" + std::to_string(heads) + R"(, std = 0.2, bias = false },)" + drop + R"(
  ] },
  { type = "residual", layers = [
    { type = "layernorm" },
    { type = "linear", out = 16, std = 0.2 },
    { type = "gelu" },
    { type = "linear", out = 8, std = 0.2 },)" + drop + R"(
  ] },
]
[[layers]]
name = "ln_f"
type = "layernorm"
[[layers]]
name = "lm_head"
type = "linear"
out = )" + std::to_string(vocab) + R"(
bias = false
tie = "wte"
)";
}

// The DpConfig that trains gpt_model: Adam at 1e-3, a transformer's usual
// rate. Two choices keep rounding differences (another summation order of
// the gradients) at rounding size, measured with 2 thread ranks: the
// attention has no biases, since the key bias's gradient is zero in exact
// arithmetic (softmax ignores a shift common to a row) and Adam turns its
// rounding noise into steps of +-lr (5e-5 apart after one step); and at Adam
// 1e-2 or SGD 0.1 the tied embedding amplifies rounding differences to
// 5e-3 - 4e-2 relative in 20 steps (SGD 0.01: 5e-6; Adam 1e-3: 9e-6).
inline DpConfig gpt_config(bool dropout = false, int heads = 2, int vocab = 11) {
  DpConfig c;
  c.optimizer = {OptimizerKind::adam, 0.001};
  c.model = gpt_model(dropout, heads, vocab);
  c.tokens = true;
  c.features = 6;
  c.classes = static_cast<std::size_t>(vocab);
  c.label_width = 6;
  c.batch = 11;
  return c;
}

// A residual MLP as the equivalence tests train it (the features and
// classes of DpConfig): a stem, two pre-norm residual blocks with GELU (and
// Dropout when `dropout`), a final LayerNorm and a head; 6 top-level layers.
inline std::string residual_model(bool dropout = false) {
  return std::string(R"(
input = [12]
[[layers]]
name = "stem"
type = "linear"
out = 16
[[layers]]
name = "blocks"
type = "residual"
repeat = 2
layers = [
  { type = "layernorm" },
  { type = "linear", out = 24 },
  { type = "gelu" },)") +
         (dropout ? "\n  { type = \"dropout\", p = 0.3 }," : "") + R"(
  { type = "linear", out = 16 },
]
[[layers]]
type = "layernorm"
[[layers]]
name = "head"
type = "linear"
out = 3
)";
}

// A small CNN as the SyncBatchNorm tests train it: 2 x 6 x 6 images (72
// features of DpConfig), a convolution, BatchNorm2d, ReLU, 2x2 max pooling, a
// second convolution with BatchNorm and global average pooling, a head of 3.
// The convolutions have no bias: BatchNorm removes it, its gradient is
// rounding noise, and Adam would turn that noise into full-size steps.
inline std::string batchnorm_cnn_model(bool sync) {
  return std::string(sync ? "sync_batchnorm = true\n" : "") + R"(input = [2, 6, 6]
[[layers]]
type = "conv2d"
out = 4
kernel = 3
padding = 1
bias = false
[[layers]]
type = "batchnorm"
[[layers]]
type = "relu"
[[layers]]
type = "maxpool2d"
kernel = 2
[[layers]]
type = "conv2d"
out = 5
kernel = 3
bias = false
[[layers]]
type = "batchnorm"
[[layers]]
type = "global_avgpool"
[[layers]]
type = "linear"
out = 3
)";
}

// The model a configuration trains.
inline ModelSpec model_of(const DpConfig& c) {
  if (!c.model.empty()) return parse_model(c.model, "test model");
  return mlp_model({c.widths, ActivationKind::relu, c.dropout, c.seed});
}

struct RunResult {
  std::vector<double> losses;
  std::vector<float> params;
  std::map<std::string, std::vector<double>> buffers;  // running statistics (by name)
  std::vector<bool> applied;   // DataParallel: whether each step was applied
  std::size_t comm_bytes = 0;  // gradient-sum payload of this rank in the last step
  double tie_drift = 0;  // ModelParallel: a tied weight against its copy on another stage
};


inline data::Dataset dp_data(const DpConfig& c) {
  if (c.tokens) return data::make_synthetic_tokens(c.samples, c.features, c.classes, c.seed);
  auto d = data::make_synthetic(c.samples, c.features, data::CsvTask::classification, c.classes, c.seed);
  if (c.label_width > 1) {
    d.label_width = c.label_width;
    d.labels.resize(c.samples * c.label_width);
    for (std::size_t i = 0; i < d.labels.size(); ++i)
      d.labels[i] = static_cast<std::int32_t>(random::below(c.seed, 4242, i, c.classes));
  }
  return d;
}

// Three positions of 4 features per sample, a Linear and GELU per position,
// then 3 x 5 outputs: one label of 5 classes per position.
inline std::string per_position_model() {
  return R"(
input = [3, 4]
[[layers]]
type = "linear"
out = 8
[[layers]]
type = "gelu"
[[layers]]
type = "layernorm"
[[layers]]
type = "linear"
out = 5
)";
}

// Single rank, global batches of c.batch * c.micro samples.
inline RunResult train_single(const DpConfig& c) {
  auto d = dp_data(c);
  Context ctx(c.gemm);
  auto model = build_model<float>(with_recompute(model_of(c), c.recompute), c.seed);
  const std::size_t global = c.batch * c.micro;
  model.build(global);
  model.init(Init::kaiming_uniform, c.seed);
  SoftmaxCrossEntropy<float> loss;
  Optimizer<float> opt(c.optimizer, model.num_params());
  Local<float> local(ctx, model, loss, opt);
  data::BatchLoader<float> loader(d, global, true, c.seed);
  RunResult r;
  data::Batch<float> b;
  for (std::size_t s = 0, epoch = 0; s < c.steps;) {
    loader.seek(epoch++, 0);
    while (s < c.steps && loader.next(b)) {
      r.losses.push_back(local.step(b));
      ++s;
    }
  }
  r.params = to_host(model.params());
  r.buffers = model.read_buffers();
  return r;
}

// DataParallel on `comm`; each rank starts from different parameters (seed +
// rank) so that the initial broadcast is tested too. Micro-batch m of a step
// is global batch (step * micro + m) of the epoch order.
inline RunResult train_dp(Context& outer, comm::Communicator& comm, const DpConfig& c,
                          const DataParallelOptions& options = {}) {
  Context ctx(c.gemm, outer.exec);
  copy_settings(outer, ctx);
  auto d = dp_data(c);
  auto model = build_model<float>(with_recompute(model_of(c), c.recompute), c.seed);
  BuildOptions b;
  b.max_batch = data::BatchLoader<float>::shard(c.batch, 0, comm.size()).second + 1;
  b.numerics.storage = options.precision;
  b.numerics.emulated = options.emulate_storage;
  model.build(b);
  model.init(Init::kaiming_uniform, c.seed + comm.rank());
  SoftmaxCrossEntropy<float> loss;
  Optimizer<float> opt(c.optimizer, model.num_params());
  DataParallel<float> dp(ctx, comm, model, loss, opt, options);
  // One loader per micro-batch slot keeps each micro-batch's buffers alive.
  std::vector<std::unique_ptr<data::BatchLoader<float>>> loaders;
  for (std::size_t m = 0; m < c.micro; ++m)
    loaders.push_back(std::make_unique<data::BatchLoader<float>>(d, c.batch, true, c.seed, false,
                                                                comm.rank(), comm.size()));
  RunResult r;
  std::size_t epoch = 0, index = 0;
  const std::size_t per_epoch = loaders[0]->batches_per_epoch();
  for (std::size_t s = 0; s < c.steps; ++s) {
    std::vector<data::Batch<float>> micro(c.micro);
    std::size_t global = 0;
    for (std::size_t m = 0; m < c.micro; ++m) {
      if (index == per_epoch) {
        index = 0;
        ++epoch;
      }
      loaders[m]->seek(epoch, index++);
      loaders[m]->next(micro[m]);
      global += loaders[m]->global_size();
    }
    r.losses.push_back(dp.step(micro, global));
    r.applied.push_back(dp.last_info().applied);
    r.comm_bytes = dp.last_info().comm_bytes;
  }
  r.params = to_host(dp.master_params());  // fp32 master weights in mixed precision
  r.buffers = model.read_buffers();
  return r;
}

// The whole state of a model-parallel run in single-rank layout, as a
// checkpoint holds it.
struct FullState {
  std::size_t step = 0;
  std::vector<float> params, opt0, opt1;
};

// ModelParallel (pipeline, tensor parallel, ZeRO-1 and meshes) on `comm`:
// each data-parallel rank loads its shard of the same global batches as
// train_single; the parameters returned are the whole model's, gathered.
// resume: start from this state (steps before it are skipped); end: the
// state after the last step.
inline RunResult train_model_parallel(Context& outer, comm::Communicator& comm, const DpConfig& c,
                                      const ModelParallelOptions& options,
                                      MemoryReport* memory = nullptr,
                                      std::size_t* peak_in_flight = nullptr,
                                      const FullState* resume = nullptr,
                                      FullState* end = nullptr,
                                      ModelParallel<float>::CheckpointShard* shard = nullptr) {
  Context ctx(c.gemm, outer.exec);
  copy_settings(outer, ctx);
  auto d = dp_data(c);
  const int dp = options.mesh.dp;
  const int dp_rank = comm.rank() / (options.mesh.pp * options.mesh.tp);
  ModelParallelOptions o = options;
  o.recompute = o.recompute || c.recompute;
  ModelParallel<float> mp(ctx, comm, model_of(c),
                          Init::kaiming_uniform, c.seed, LossKind::cross_entropy, c.optimizer,
                          data::BatchLoader<float>::shard(c.batch, 0, dp).second, o);
  std::size_t first = 0;
  if (resume) {
    mp.set_full_params(resume->params);
    mp.set_full_optimizer_state(0, resume->opt0);
    mp.set_full_optimizer_state(1, resume->opt1);
    mp.optimizer().set_steps(static_cast<std::int64_t>(resume->step));
    first = resume->step;
  }
  data::BatchLoader<float> loader(d, c.batch, true, c.seed, false, dp_rank, dp);
  RunResult r;
  data::Batch<float> b;
  std::size_t peak = 0;
  for (std::size_t s = 0, epoch = 0; s < c.steps;) {
    loader.seek(epoch++, 0);
    while (s < c.steps && loader.next(b)) {
      if (s++ < first) continue;
      r.losses.push_back(mp.step(b, loader.global_size()));
      r.comm_bytes = mp.last_info().comm_bytes;
      peak = std::max(peak, mp.peak_in_flight());
    }
  }
  r.params = mp.full_params();
  r.tie_drift = mp.tied_copy_deviation();
  if (memory) *memory = mp.memory();
  if (peak_in_flight) *peak_in_flight = peak;
  if (end) *end = {c.steps, r.params, mp.full_optimizer_state(0), mp.full_optimizer_state(1)};
  if (shard) *shard = mp.checkpoint_shard();
  return r;
}

// Parameters whose magnitude is below this are compared as if they had it:
// a parameter that passes near zero is a difference of larger values (the
// initial weights here are U(-b, b) with b = sqrt(6 / fan_in), 0.5 to 0.7)
// and carries their absolute rounding error, not one relative to itself.
// A tenth of the initial scale: at rel = 1e-5 an absolute 5e-7, four times
// the largest difference measured near zero (1.1e-7 on a weight of 0.0104
// of the residual model after 20 Adam steps on 2 thread ranks, where the
// gradient sums over the batch are reassociated).
inline constexpr double kParamFloor = 5e-2;

// "" when a and b agree within rel: every loss relative to itself, every
// parameter relative to its own magnitude (at least kParamFloor).
// Largest deviation of a from b: of the losses (relative) and of the
// parameters relative to the largest parameter magnitude of b. For the
// 16-bit tests, whose rounding moves small parameters by amounts of the
// order of the large ones' rounding; equivalence uses compare() (per
// parameter).
inline std::pair<double, double> deviation_of_largest(const RunResult& a, const RunResult& b) {
  double loss = 0, scale = 0, param = 0;
  for (std::size_t i = 0; i < a.losses.size() && i < b.losses.size(); ++i)
    loss = std::max(loss, std::fabs(a.losses[i] - b.losses[i]) / std::fabs(b.losses[i]));
  for (float p : b.params) scale = std::max(scale, double(std::fabs(p)));
  for (std::size_t i = 0; i < a.params.size() && i < b.params.size(); ++i)
    param = std::max(param, std::fabs(double(a.params[i]) - b.params[i]) / scale);
  return {loss, param};
}

inline std::string compare(const RunResult& a, const RunResult& b, double rel) {
  if (a.losses.size() != b.losses.size() || a.params.size() != b.params.size()) return "sizes differ";
  for (std::size_t i = 0; i < a.losses.size(); ++i)
    if (std::fabs(a.losses[i] - b.losses[i]) > rel * std::fabs(b.losses[i]))
      return "loss of step " + std::to_string(i + 1) + ": " + std::to_string(a.losses[i]) + " vs " +
             std::to_string(b.losses[i]);
  for (std::size_t i = 0; i < a.params.size(); ++i)
    if (std::fabs(double(a.params[i]) - b.params[i]) >
        rel * std::max(kParamFloor, std::fabs(double(b.params[i]))))
    {
      char buf[160];
      std::snprintf(buf, sizeof buf, "parameter %zu: %.9g vs %.9g (difference %.3g)", i,
                    double(a.params[i]), double(b.params[i]),
                    std::fabs(double(a.params[i]) - b.params[i]));
      return buf;
    }
  // Buffers (BatchNorm's running statistics) when both runs kept them.
  if (!a.buffers.empty() && !b.buffers.empty()) {
    if (a.buffers.size() != b.buffers.size()) return "buffer counts differ";
    for (const auto& [name, want] : b.buffers) {
      const auto it = a.buffers.find(name);
      if (it == a.buffers.end() || it->second.size() != want.size()) return "buffer " + name + " differs in size";
      for (std::size_t i = 0; i < want.size(); ++i)
        if (std::fabs(it->second[i] - want[i]) > rel * std::max(kParamFloor, std::fabs(want[i])))
          return "buffer " + name + "[" + std::to_string(i) + "]: " + std::to_string(it->second[i]) +
                 " vs " + std::to_string(want[i]);
    }
  }
  return "";
}

}  // namespace strata::test
