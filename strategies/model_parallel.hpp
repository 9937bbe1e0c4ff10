// Model parallelism and its combinations: pipeline stages, tensor-parallel
// layers and a sharded optimizer (ZeRO stage 1), composed over a device mesh
// (dp x pp x tp) with data parallelism.
//
// Pipeline: the model's layers are cut into pp stages (cut points given, or
// balanced by parameters or by FLOPs); stage p runs on pipeline rank p. Each
// data-parallel shard of the global batch is split into M micro-batches;
// activations go forward and their gradients backward with send/recv.
// The order of each stage's forwards and backwards: a schedule
// (strategies/pipeline_schedule.hpp: gpipe, 1f1b).
// The last stage computes the loss (scaled by 1 / global batch, so that
// micro-batches and data-parallel shards add up to the mean).
//
// Tensor parallelism: within a stage, Linear layers are split over the tp
// ranks (strategies/tensor_parallel.hpp).
//
// Data parallelism over the dp ranks of each (stage, tensor shard): gradients
// are summed in buckets during the last backward (or, with ZeRO, reduce-
// scattered unit by unit: each rank updates its 1/dp shard of the parameters
// and optimizer state, and the updated shards are all-gathered;
// strategies/sharded_optimizer.hpp).
//
// Every configuration starts from the parameters single-rank training of the
// whole model would (each shard is cut from the single-rank initialisation)
// and takes the same steps up to rounding.
#pragma once

#include "data/loader.hpp"
#include "layers/loss.hpp"
#include "layers/mlp.hpp"
#include "layers/registry.hpp"
#include "layers/optimizer.hpp"
#include "strategies/local.hpp"
#include "strategies/mesh.hpp"
#include "strategies/gradient_sync.hpp"
#include "strategies/mixed_precision.hpp"
#include "strategies/pipeline_schedule.hpp"
#include "strategies/sharded_optimizer.hpp"
#include "strategies/stage_layout.hpp"
#include "strategies/stage_ties.hpp"
#include "strategies/tensor_parallel.hpp"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace strata {

enum class Balance { params, flops };
Balance parse_balance(const std::string& name);  // throws config
const char* to_string(Balance balance);

// Precision, clipping and loss scaling: MixedPrecisionOptions (with ZeRO
// the fp32 master weights are sharded with the optimizer state); gradient
// buckets (with ZeRO: the units of the shards), overlap and compression over
// the data-parallel group: GradSyncOptions.
struct ModelParallelOptions : MixedPrecisionOptions, GradSyncOptions {
  MeshShape mesh;
  std::size_t micro_batches = 1;
  Schedule schedule = Schedule::one_f_one_b;
  // Index of the first layer of stages 1..pp-1 (pp - 1 increasing values);
  // empty: balanced automatically.
  std::vector<std::size_t> cuts;
  Balance balance = Balance::params;
  int zero = 0;  // ZeRO stage (strategies/sharded_optimizer.hpp): 0, 1 or 2
  bool recompute = false;  // activation recomputation in every top-level block
  // Sequence parallelism with tensor parallelism (strategies/sequence_parallel.hpp).
  bool sequence_parallel = false;
  // --reproducible (strategies/reproducible.hpp): samples per chunk, and
  // values per chunk of the sums tensor parallelism splits (--tp-chunk, needed
  // with tp > 1); 0: off.
  std::size_t reproducible_chunk = 0;
  std::size_t reproducible_tp_chunk = 0;
  // Bytes per rank for parameters, gradients, optimizer state and
  // activations; 0: no limit. Checked before anything is allocated.
  std::size_t memory_budget = 0;
};

// Bytes one rank holds.
struct MemoryReport {
  std::size_t params = 0, grads = 0, optimizer = 0, activations = 0;
  std::size_t master = 0;  // fp32 master weights (16-bit precision)
  std::size_t slots = 0;   // micro-batches of activations the stage can hold
  std::size_t total() const { return params + grads + optimizer + master + activations; }
  std::string str() const;  // "params 1.2 MiB, grads ..., total ..."
};

// What one rank of pipeline stage p holds (options: its mesh, micro-batches,
// schedule, ZeRO, precision, compression), known before anything is
// allocated: `stage` need not be built. max_shard: the largest
// data-parallel shard of the global batch; cross: the stage's layers of
// ties across stages (StageTies::layers; ZeRO-2 and 3 pin their units).
// ModelParallel's own accounting, and the planner's (planner/cost_model.hpp).
template <class T>
MemoryReport stage_memory(const Sequential<T>& stage, const ModelParallelOptions& options,
                          const OptimizerConfig& optimizer, std::size_t max_shard, int p,
                          const std::vector<std::size_t>& cross = {});

// Stage boundaries: cuts[s] is the first layer of stage s, cuts[pp] the
// number of layers. Throws config for more stages than layers, cuts that are
// not increasing, out of range, or inside a tensor-parallel pair.
std::vector<std::size_t> plan_stages(const std::vector<double>& cost,
                                     const std::vector<bool>& cut_ok, int stages,
                                     const std::vector<std::size_t>& cuts);

template <class T>
class ModelParallel {
 public:
  // Collective over world. model: the whole model (a model file's, or an
  // MLP's: mlp_model); init/seed: its single-rank initialisation (and its
  // dropout streams); max_shard: the largest data-parallel shard of a global
  // batch this rank will get. Throws config (before any work) for an
  // impossible configuration or a model over the memory budget.
  ModelParallel(Context& ctx, comm::Communicator& world, const ModelSpec& model, Init init,
                std::uint64_t seed, LossKind loss, const OptimizerConfig& optimizer,
                std::size_t max_shard, const ModelParallelOptions& options);
  ~ModelParallel();

  // One optimizer step. shard: this data-parallel rank's rows of the global
  // batch (every stage and tensor shard of a pipeline gets the same rows;
  // the first stage reads x, the last the targets). Returns the mean loss
  // over the global batch, identical on every rank.
  double step(const data::Batch<T>& shard, std::size_t global_samples);

  // The whole model's parameters in single-rank layout (collective over
  // world); with a 16-bit precision the fp32 master weights.
  std::vector<T> full_params();
  // Sets this rank's shard from the whole model's parameters (single-rank
  // layout; with a 16-bit precision the master weights, and the working
  // weights rounded from them).
  void set_full_params(const std::vector<T>& full);
  // Optimizer state buffer k (0, 1; see Optimizer::state0/state1) of the
  // whole model in single-rank layout (empty when the optimizer keeps none),
  // and back: checkpoints of any mesh are single-rank checkpoints, resumable
  // on any other mesh. Collective over world.
  std::vector<T> full_optimizer_state(int k);
  void set_full_optimizer_state(int k, const std::vector<T>& full);

  // This rank's share of a sharded checkpoint (no communication): the values
  // of the whole model, in single-rank layout, that this rank alone writes,
  // as (offset, length) ranges of that layout with their parameters and
  // optimizer state (opt0/opt1 empty when the optimizer keeps none). Over all
  // ranks the ranges cover the model exactly once: each stage's values are
  // split evenly over its data-parallel ranks (with ZeRO-1: each rank's own
  // slice of the optimizer state), tensor shards go to their tensor rank and
  // values replicated over the tensor group to tensor rank 0.
  struct CheckpointShard {
    std::vector<std::pair<std::size_t, std::size_t>> ranges;
    std::vector<T> params, opt0, opt1;
  };
  CheckpointShard checkpoint_shard();
  // The values of every buffer of the whole model (Sequential::read_buffers
  // names; each read from a rank whose stage holds it), and back: every rank
  // writes those of its stage. Collective over world.
  std::map<std::string, std::vector<double>> full_buffers(
      const std::vector<BufferInfo>& model_buffers) {
    return layout_->gather_buffers(model_buffers);
  }
  void set_full_buffers(const std::map<std::string, std::vector<double>>& values) {
    layout_->scatter_buffers(values);
  }
  // The mesh, ZeRO stage and stage cuts, as text (sharded checkpoints keep it).
  std::string layout() const;
  // Parameters of the whole model.
  std::size_t full_num_params() const { return layout_->full_num_params(); }

  // The stage model: this rank's layers (sharded ones included).
  Sequential<T>& stage() { return *stage_; }
  Mesh& mesh() { return *mesh_; }
  bool first_stage() const { return mesh_->pp_rank() == 0; }
  bool last_stage() const { return mesh_->pp_rank() + 1 == mesh_->shape().pp; }
  const std::vector<std::size_t>& stage_bounds() const { return bounds_; }
  Optimizer<T>& optimizer() { return sharded_->optimizer(); }
  // The loss scaler (nullptr without loss scaling).
  DynamicLossScaler* scaler() { return sharded_->precision().scaler(); }
  // What the last step did: applied or skipped, gradient norm, loss scale.
  const StepInfo& last_info() const { return info_; }
  MemoryReport memory() const { return memory_; }
  // Most micro-batches whose activations were held at once (last step).
  std::size_t peak_in_flight() const { return peak_in_flight_; }
  // Where the last step's time went on this rank (seconds): waiting for
  // activations or gradients from the neighbouring stages (the pipeline
  // bubble as this stage sees it), and the data-parallel synchronisation
  // with the optimizer step.
  struct Timing {
    double step_s = 0, pipeline_wait_s = 0, sync_s = 0;
  };
  const Timing& last_timing() const { return timing_; }
  // Evaluates the whole model over a data set (evaluation mode; collective
  // over world): every pipeline runs the data set through its stages, the
  // result is the same on every rank.
  Evaluation evaluate(const data::Dataset& data);
  // Largest difference between a tied weight and its copy on another stage
  // (0 without such ties; collective over the world): 0 when they agree bitwise.
  double tied_copy_deviation() { return ties_->copy_deviation(); }

 private:
  void forward_micro(const data::Batch<T>& shard, std::size_t m, std::size_t first,
                     std::size_t count, T scale, ExactSum& loss_sum);
  void backward_micro(std::size_t m, std::size_t count, bool last);
  Matrix<T> rows(const VectorBuffer<T>& buf, std::size_t count, std::size_t width) const;
  Context& ctx_;
  std::unique_ptr<Mesh> mesh_;
  ModelParallelOptions options_;
  std::vector<std::size_t> bounds_;  // stage s: layers [bounds_[s], bounds_[s+1])
  std::size_t max_micro_ = 0;
  std::unique_ptr<Sequential<T>> stage_;
  std::unique_ptr<StageTies<T>> ties_;  // tied weights across stages (this rank's pipeline)
  std::unique_ptr<Loss<T>> loss_;
  // The data-parallel gradient sums and the update (ZeRO).
  std::unique_ptr<ShardedOptimizer<T>> sharded_;
  // The stage's values <-> the whole model's single-rank layout.
  std::unique_ptr<StageLayout<T>> layout_;
  StepInfo info_;
  std::size_t slots_ = 1, in_flight_ = 0, peak_in_flight_ = 0;
  // Received activations per slot (stages after the first), the received
  // output gradient and the input gradient sent back.
  std::vector<VectorBuffer<T>> inputs_;
  VectorBuffer<T> dy_, dx_;
  MemoryReport memory_;
  Timing timing_;
};

}  // namespace strata
