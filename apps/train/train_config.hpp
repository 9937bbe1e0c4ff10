// Options of strata-train, parsed and validated before any work starts.
#pragma once

#include "backends/blas.hpp"
#include "backends/precision.hpp"
#include "layers/layer.hpp"
#include "layers/activation.hpp"
#include "layers/loss.hpp"
#include "layers/model_spec.hpp"
#include "layers/lr_schedule.hpp"
#include "layers/optimizer.hpp"
#include "strategies/strategy_kind.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace strata::app {

enum class Normalize { automatic, none, global, per_feature };
// "auto", "none", "global", "per-feature"; parse_normalize throws config
// naming --normalize and the value.
Normalize parse_normalize(const std::string& name);
const char* to_string(Normalize n);

struct TrainConfig {
  std::string dataset = "fashion-mnist";  // fashion-mnist | synthetic | csv:PATH | fortunes | text:PATH
  std::string data_dir;                   // empty: default directory
  std::size_t samples = 1024;             // synthetic
  double test_fraction = 0.1;             // synthetic, csv and text
  std::size_t eval_every = 0;             // also evaluate every N steps (0: at epoch ends only)
  std::size_t seq_len = 0;                // text: tokens per sample (0: the model's input length)
  std::string tokenizer;                  // text: a BPE file (strata-tokenize train); empty: bytes
  std::vector<std::size_t> input_shape;   // --input-shape: the CSV's sample shape
  std::size_t random_crop = 0;            // augmentation: padding of the random crop
  bool random_flip = false;               // augmentation: random horizontal flip
  std::string model_file;  // --model: a TOML model description (else the MLP of --layers)
  bool describe = false;   // print the layer table and exit
  bool dry_run = false;    // check everything a run would check first, then exit (nothing trained)
  bool recompute = false;  // activation recomputation in every top-level block
  bool reproducible = false;  // --reproducible (strategies/reproducible.hpp)
  std::size_t chunk = 0;      // its samples per chunk (0: default_chunk)
  std::size_t tp_chunk = 0;   // --tp-chunk: features per chunk of a split sum (0: off)
  bool sync_bn = false;    // SyncBatchNorm over the data-parallel ranks
  std::vector<std::size_t> layers{784, 256, 128, 10};
  ActivationKind activation = ActivationKind::relu;
  double dropout = 0.0;
  LossKind loss = LossKind::cross_entropy;
  std::size_t epochs = 1;
  std::size_t steps = 0;  // > 0: stop after this many steps (overrides epochs)
  std::size_t batch_size = 128;
  OptimizerConfig optimizer;
  LrSchedule lr_schedule;  // --lr-schedule, --lr-min, --lr-warmup-steps (lr: optimizer.lr)
  Init init = Init::kaiming_uniform;
  Normalize normalize = Normalize::automatic;
  bool shuffle = true;
  std::uint64_t seed = 42;
  std::string metrics;      // JSON-lines file
  std::string trace;        // Chrome trace-event JSON (timeline)
  std::string kernel_shapes;  // Markdown table of the kernel launches
  std::size_t log_every = 100;
  std::size_t warmup_steps = 5;  // excluded from samples_per_sec
  bool evaluate = true;
  bool quiet = false;
  std::optional<GemmBackend> gemm;  // --gemm vendor | portable; auto: none (the vendor's when compiled in)
  // Parallelism.
  StrategyKind strategy = StrategyKind::automatic;  // --strategy
  std::string plan_profile;       // --strategy plan: the machine profile (strata-plan calibrate)
  std::string comm = "auto";      // auto | self | threads | mpi | hierarchical | nccl
  int ranks = 1;                  // thread ranks per process
  int threads = 0;                // Kokkos threads per rank (0: cores / ranks on this node)
  int device = -1;                // GPU of this process (-1: node-local rank modulo devices)
  double bucket_mb = 25;          // gradient bucket size (0: one bucket)
  bool overlap = true;            // communicate buckets during backward
  std::size_t accumulate = 1;     // micro-batches per optimizer step
  // Mixed precision (docs/mixed-precision.md).
  Precision precision = Precision::fp32;  // activation storage and working weights
  std::string grad_compression = "none";  // none | bf16 | fp16: gradient allreduce in 16 bits
  double clip_grad_norm = 0;              // > 0: clip by global L2 norm
  std::string loss_scale = "auto";        // auto (dynamic for fp16) | dynamic | none
  std::int64_t loss_scale_growth_interval = 2000;  // good steps before the scale grows
  std::size_t max_skipped_steps = 100;  // loss scaling: skipped steps in a row before giving up
  bool verbose_ranks = false;     // every rank prints (default: global rank 0 only)
  // Model parallelism (0: derived from the strategy and the world size).
  int dp = 0, pp = 0, tp = 0;
  std::size_t micro_batches = 0;         // micro-batches per step (0: planner::default_micro_batches)
  std::string schedule = "1f1b";         // gpipe | 1f1b
  std::vector<std::size_t> stage_cuts;   // first layer of stages 1..pp-1 (empty: balanced)
  std::string balance = "params";        // params | flops
  int zero = 0;                          // 1: shard optimizer state over data-parallel ranks
  bool sequence_parallel = false;        // with --tp: LayerNorm, Dropout, residual on sequence shards
  double memory_budget_mb = 0;           // per rank; 0: no limit
  double collective_timeout_s = 0;       // 0: STRATA_COMM_TIMEOUT, else 300
  // Checkpoints.
  std::string checkpoint_dir;
  std::size_t checkpoint_every = 0;  // steps; 0: at the end of every epoch
  int keep_checkpoints = 3;
  bool resume = false;               // from the latest checkpoint in checkpoint_dir
  std::string resume_from;           // a checkpoint file
  // Weights in and out (safetensors, PyTorch's names: strategies/weights.hpp).
  std::string init_from;             // start from these weights
  bool strict = true;                // --no-strict: skip what does not match, and report it
  std::string export_file;           // write the trained weights here
  std::string export_dtype = "f32";  // f32 | bf16 | f16 | f64
};

// Whether the configuration needs the model-parallel engine (pipeline,
// tensor parallelism, ZeRO-1 or a memory budget) rather than DataParallel.
bool model_parallel(const TrainConfig& c);
// --dp, --pp, --tp and --zero as the strategy rules take them.
MeshFactors mesh_factors(const TrainConfig& c);
// Whether the loss is scaled dynamically (--loss-scale dynamic, or auto with fp16).
bool loss_scaling(const TrainConfig& c);

// The model to train: the file of --model, or the MLP of --layers,
// --activation and --dropout. Throws config for a bad model file.
ModelSpec model_spec(const TrainConfig& c);
// Whether --dataset names text (a language model's corpus).
bool text_data(const TrainConfig& c);

// The options that say which model and which data, read alike by
// strata-train and strata-predict (one definition of their names, help,
// checks and defaults): --dataset, --data-dir, --samples, --test-fraction,
// --seq-len, --input-shape, --normalize, --model, --layers, --activation,
// --dropout, --loss and --seed. add_model_data_options binds them to `c` and
// to `o`, which must outlive the parse (the handles say which were given);
// finish_model_data_options, after the parse, turns o's text into c's values
// and refuses --model with the MLP's options. check_data_rules checks the
// rules between the data set and the other options (text data, --data-dir,
// --loss mse), once the data set is known (strata-predict: after taking a
// checkpoint's).
struct ModelDataOptions {
  std::string layers = "784,256,128,10", activation = "relu", loss = "cross-entropy",
              normalize = "auto";
  CLI::Option *dataset = nullptr, *seed = nullptr, *model = nullptr, *layers_option = nullptr,
              *activation_option = nullptr, *dropout = nullptr, *loss_option = nullptr;
};
void add_model_data_options(CLI::App& app, TrainConfig& c, ModelDataOptions& o);
void finish_model_data_options(const ModelDataOptions& o, TrainConfig& c);
void check_data_rules(const TrainConfig& c);

// Parses the program's arguments (argv without argv[0] and without Kokkos
// options). Returns nullopt after printing --help or --version output.
// Throws strata::Error (config) for bad or contradictory options.
std::optional<TrainConfig> parse_train_args(const std::vector<std::string>& args);

}  // namespace strata::app
