// The strategy a training loop drives, for any model description: one
// interface over data parallelism (one rank is local training) and the
// model-parallel mesh (pipeline, tensor parallelism, ZeRO-1, hybrids).
//
//   EngineOptions o;  o.model = read_model_file("models/residual-mlp.toml"); ...
//   auto engine = make_engine(ctx, comm, o, global_batch);
//   loss = engine->step(micro_batches, global_samples);   // every step
//   engine->save(checkpoint, position);                   // every rank
//
// Engines hold the model in their own layout; checkpoints are always in the
// single-rank layout keyed by parameter names (strategies/checkpoint_state.hpp),
// so any engine resumes any other's checkpoint.
#pragma once

#include "data/loader.hpp"
#include "layers/loss.hpp"
#include "layers/model_spec.hpp"
#include "layers/optimizer.hpp"
#include "strategies/checkpoint_state.hpp"
#include "strategies/data_parallel.hpp"
#include "strategies/local.hpp"
#include "strategies/model_parallel.hpp"
#include "strategies/reproducible.hpp"
#include "strategies/weights.hpp"

#include <memory>
#include <string>
#include <vector>

namespace strata {

struct EngineOptions {
  ModelSpec model;
  Init init = Init::kaiming_uniform;
  std::uint64_t seed = 42;  // initialisation and dropout streams
  LossKind loss = LossKind::cross_entropy;
  OptimizerConfig optimizer;
  // The mesh engine (ModelParallel) when set; else data parallelism over
  // every rank of the communicator.
  bool model_parallel = false;
  bool recompute = false;  // activation recomputation in every top-level block
  // --reproducible (strategies/reproducible.hpp): samples per chunk of the
  // global batch; 0: off. The engine puts the context into reproducible
  // arithmetic.
  std::size_t reproducible_chunk = 0;
  // and values per chunk of the sums tensor parallelism splits (--tp-chunk;
  // needed for --tp > 1; the same for every run that must agree); 0: off.
  std::size_t reproducible_tp_chunk = 0;
  DataParallelOptions data;     // buckets, overlap, compression, mixed precision
  ModelParallelOptions mesh;    // mesh, pipeline schedule, ZeRO-1, mixed precision
};

// Where and how a checkpoint is written.
struct CheckpointTarget {
  std::string dir;
  int keep = 3;
  std::string config;  // JSON that a resuming run must match
};

class Engine {
 public:
  virtual ~Engine() = default;
  // "data parallel over 4 ranks, bf16 activations ..." for the banner.
  virtual std::string describe() const = 0;
  // Parameters of the whole model.
  virtual std::size_t num_params() const = 0;
  // Which shard of each global batch this rank loads, of how many.
  virtual int data_rank() const = 0;
  virtual int data_ranks() const = 0;
  // One optimizer step over this rank's micro-batches; global: samples of
  // the step over every rank. Returns the mean loss, the same on every rank.
  virtual double step(const std::vector<data::Batch<float>>& micro, std::size_t global) = 0;
  // The learning rate of the steps that follow (a schedule sets it before each).
  virtual void set_lr(double lr) = 0;
  // After a non-finite loss or a skipped step: where the first non-finite
  // values are.
  virtual std::string first_nonfinite() = 0;
  // What the last step did: applied or skipped (loss scaling), the scale.
  virtual const StepInfo& last_info() const = 0;
  // Collective engines: every rank calls evaluate(); else only rank 0.
  virtual bool collective() const = 0;
  virtual Evaluation evaluate(const data::Dataset& d, std::size_t batch) = 0;
  // Writes the checkpoint of position p (every rank calls it); returns its
  // file on rank 0, "" elsewhere.
  virtual std::string save(const CheckpointTarget& target, const Position& p) = 0;
  // Every rank restores the same snapshot (single-rank layout).
  virtual void restore(const Snapshot& s) = 0;
  // The model's weights (fp32 master weights with a 16-bit precision) and
  // buffers in single-rank layout, on every rank (collective), and back
  // (every rank gives the same; the optimizer state stays as it is; buffers
  // not given keep their values).
  virtual Weights weights() = 0;
  virtual void set_weights(const Weights& w) = 0;
  // The parameter tensors and buffers of the single-rank model.
  const ModelTable& table() const { return table_; }

 protected:
  ModelTable table_;
};

// The engine `o` asks for on `comm`; batch: the global batch size.
std::unique_ptr<Engine> make_engine(Context& ctx, comm::Communicator& comm,
                                    const EngineOptions& o, std::size_t batch);

// Sets the engine's weights from a safetensors file, by import_weights'
// rules (every rank reads it; collective). Returns what matched.
ImportReport load_weights(Engine& e, const std::string& path, bool strict);
// Writes the engine's weights as a safetensors file (export_weights) with
// `metadata` added; collective, and only the rank with `writes` writes.
void save_weights(Engine& e, const std::string& path, safetensors::DType dtype,
                  const std::map<std::string, std::string>& metadata, bool writes);

}  // namespace strata
