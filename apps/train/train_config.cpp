#include "apps/train/train_config.hpp"

#include "apps/common/cli.hpp"

#include "backends/error.hpp"
#include "backends/runtime.hpp"
#include "data/dataset_source.hpp"
#include "layers/mlp.hpp"
#include "strategies/gradient_sync.hpp"
#include "strategies/weights.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <iostream>

namespace strata::app {

namespace {
// "2,4" -> {2, 4}; throws config naming the option and the bad field.
std::vector<std::size_t> parse_positive_list(const char* option, const std::string& text) {
  std::vector<std::size_t> values;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find(',', start), text.size());
    const std::string field = text.substr(start, end - start);
    std::size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(field, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    STRATA_REQUIRE(!field.empty() && used == field.size() && v > 0, config, option, " '", text,
                   "': '", field, "' is not a positive integer");
    values.push_back(static_cast<std::size_t>(v));
    start = end + 1;
  }
  return values;
}
}  // namespace

bool model_parallel(const TrainConfig& c) {
  return needs_mesh(c.strategy) || c.pp > 1 || c.tp > 1 || c.zero > 0 || c.memory_budget_mb > 0 ||
         c.sequence_parallel || !c.stage_cuts.empty() ||
         c.micro_batches > 0;
}

MeshFactors mesh_factors(const TrainConfig& c) { return {c.dp, c.pp, c.tp, c.zero}; }

bool loss_scaling(const TrainConfig& c) {
  return c.loss_scale == "dynamic" || (c.loss_scale == "auto" && c.precision == Precision::fp16);
}

bool text_data(const TrainConfig& c) {
  return data::parse_dataset_source(c.dataset).kind == data::SourceKind::text;
}

ModelSpec model_spec(const TrainConfig& c) {
  ModelSpec m = !c.model_file.empty() ? read_model_file(c.model_file)
                                      : mlp_model({c.layers, c.activation, c.dropout, c.seed});
  if (c.seq_len > 0) {  // a language model's windows: the model takes input = [seq_len]
    STRATA_REQUIRE(m.input.rank() == 1 && !m.mlp, config, "--seq-len ", c.seq_len, ": the model ",
                   m.source, " takes inputs of shape ", m.input.str(),
                   "; a language model's file says input = [T] (token ids) and starts with an "
                   "embedding");
    m.input = Shape{c.seq_len};
  }
  m.sync_batchnorm = m.sync_batchnorm || c.sync_bn;
  return m;
}

Normalize parse_normalize(const std::string& name) {
  for (Normalize n : {Normalize::automatic, Normalize::none, Normalize::global, Normalize::per_feature})
    if (name == to_string(n)) return n;
  STRATA_THROW(config, "--normalize: unknown value '", name,
               "' (expected auto, none, global or per-feature)");
}

const char* to_string(Normalize n) {
  switch (n) {
    case Normalize::automatic: return "auto";
    case Normalize::none: return "none";
    case Normalize::global: return "global";
    case Normalize::per_feature: return "per-feature";
  }
  return "?";
}

void add_model_data_options(CLI::App& app, TrainConfig& c, ModelDataOptions& o) {
  o.dataset = app.add_option("--dataset", c.dataset,
                 "fashion-mnist | synthetic | csv:PATH (CSV: numeric features, last column the "
                 "label, or the targets for --loss mse) | text:PATH (a text file or a directory of "
                 "them, byte tokens, for language models) | fortunes (text: Debian's fortunes)")
      ->capture_default_str();
  app.add_option("--data-dir", c.data_dir,
                 "Fashion-MNIST directory (default: $STRATA_FASHION_MNIST_DIR or Debian's "
                 "dataset-fashion-mnist directory)");
  app.add_option("--samples", c.samples, "number of synthetic samples")
      ->capture_default_str()
      ->check(whole_number(1));
  app.add_option("--test-fraction", c.test_fraction,
                 "fraction of synthetic or CSV samples (text: of the tokens, the tail) held out "
                 "for testing")
      ->capture_default_str()
      ->check(number_in(0.0, 0.9));
  app.add_option("--seq-len", c.seq_len,
                 "text data: tokens per training window (default: the model's input = [T]; at "
                 "most its position_embedding context)")
      ->check(whole_number(1));
  app.add_option("--input-shape", c.input_shape,
                 "the shape of one sample of a CSV data set, e.g. 3,32,32 (channels, height, "
                 "width; synthetic data takes the model's input shape)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  o.model = app.add_option("--model", c.model_file,
                                      "a TOML model file (models/*.toml) instead of --layers");
  o.layers_option = app.add_option("--layers", o.layers, "MLP layer widths, input first, e.g. 784,256,128,10")
      ->capture_default_str();
  o.activation_option =
      app.add_option("--activation", o.activation, "MLP: relu | gelu | tanh | sigmoid")->capture_default_str();
  o.dropout = app.add_option("--dropout", c.dropout, "MLP: dropout probability after each hidden activation")
      ->capture_default_str()
      ->check(number_in(0.0, 0.99));
  o.loss_option = app.add_option("--loss", o.loss, "cross-entropy | mse")->capture_default_str();
  app.add_option("--normalize", o.normalize,
                 "auto | none | global | per-feature (auto: global for images, per-feature for "
                 "CSV, none for synthetic)")
      ->capture_default_str();
  o.seed = app.add_option("--seed", c.seed, "random seed (initialisation, shuffling, dropout, data)")
      ->capture_default_str()
      ->check(whole_number());
}

void finish_model_data_options(const ModelDataOptions& o, TrainConfig& c) {
  STRATA_REQUIRE(o.model->count() == 0 ||
                     (o.layers_option->count() == 0 && o.activation_option->count() == 0 &&
                      o.dropout->count() == 0),
                 config, "--model ", c.model_file, " describes the layers; --layers, --activation "
                 "and --dropout describe an MLP instead: give one or the other");
  c.layers = parse_widths(o.layers);
  c.activation = parse_activation(o.activation);
  c.loss = parse_loss(o.loss);
  c.normalize = parse_normalize(o.normalize);
}

void check_data_rules(const TrainConfig& c) {
  const data::DatasetSource source = data::parse_dataset_source(c.dataset);  // throws config
  STRATA_REQUIRE(c.tokenizer.empty() || text_data(c), config,
                 "--tokenizer applies to text data (--dataset text:PATH or fortunes)");
  STRATA_REQUIRE(c.seq_len == 0 || text_data(c), config,
                 "--seq-len applies to text data (--dataset text:PATH or fortunes)");
  STRATA_REQUIRE(!text_data(c) || c.normalize == Normalize::automatic ||
                     c.normalize == Normalize::none,
                 config, "--normalize ", to_string(c.normalize), ": text data are token ids, never normalised");
  STRATA_REQUIRE(!text_data(c) || c.loss == LossKind::cross_entropy, config,
                 "text data trains a language model with --loss cross-entropy (next-token labels)");
  STRATA_REQUIRE(c.data_dir.empty() || source.kind == data::SourceKind::fashion_mnist, config,
                 "--data-dir applies to --dataset fashion-mnist only");
  STRATA_REQUIRE(c.loss != LossKind::mse || source.kind != data::SourceKind::fashion_mnist, config,
                 "--loss mse needs regression targets, but fashion-mnist has class labels "
                 "(use --loss cross-entropy)");
}

std::optional<TrainConfig> parse_train_args(const std::vector<std::string>& args) {
  TrainConfig c;
  CLI::App app{
      "strata-train: train a neural network (an MLP, or a CNN or transformer from a model file) "
      "with Strata, on thread ranks, MPI processes or GPUs.\n"
      "Kokkos options (--kokkos-num-threads=N, --kokkos-help, ...) pass through to Kokkos.\n"
      "Exit codes: 0 done, 2 bad options or configuration, 3 bad input data,\n"
      "4 numerical or runtime failure.",
      "strata-train"};
  app.get_formatter()->column_width(34);
  std::string optimizer = "sgd", init = "kaiming-uniform";
  double lr = 0;
  bool no_shuffle = false, no_eval = false, no_overlap = false, version = false;

  ModelDataOptions model_data;
  add_model_data_options(app, c, model_data);
  app.add_option("--eval-every", c.eval_every,
                 "also evaluate on the test split every N steps (default: at the end of each epoch "
                 "only)")
      ->check(whole_number(1));
  app.add_option("--tokenizer", c.tokenizer,
                 "text data: a BPE file from strata-tokenize train (default: byte tokens, vocab 256); "
                 "the model's embedding vocab must be its vocabulary");
  app.add_option("--random-crop", c.random_crop,
                 "augment training images: pad by N pixels and crop back at a random offset "
                 "(torchvision's RandomCrop(size, padding=N))")
      ->check(whole_number(0));
  app.add_flag("--random-flip", c.random_flip,
               "augment training images: mirror left to right with probability 1/2");
  app.add_flag("--describe", c.describe,
               "print the model's layer table (shapes, parameters, FLOPs, activation bytes) and exit");
  app.add_flag("--dry-run", c.dry_run,
               "check what a run checks before it trains (the options, the model, the layout "
               "against the ranks started, --strategy plan's choice, the data) and print the "
               "layout and the memory per rank the planner's accounting predicts; allocates no "
               "engine, trains and writes nothing (put it on a job script's srun line to check "
               "the job before it queues for hours)");
  app.add_flag("--sync-bn", c.sync_bn,
               "SyncBatchNorm: BatchNorm layers normalise with the statistics of the whole "
               "global batch over the data-parallel ranks (default: each rank its own shard, as "
               "PyTorch's BatchNorm under DDP; the model file's sync_batchnorm = true does the same)");
  app.add_flag("--recompute", c.recompute,
               "recompute every block's inside in backward (keeps only block inputs: less "
               "activation memory, one more forward of the blocks)");
  app.add_flag("--reproducible", c.reproducible,
               "the same bits (losses, parameters, checkpoints) on any number of ranks, threads "
               "per rank, strategy and GEMM backend: exact sums over chunks of the batch and a "
               "fixed-order GEMM (docs/design-notes.md); drops an epoch's last partial batch");
  auto* chunk_option =
      app.add_option("--chunk", c.chunk,
                     "--reproducible: samples per chunk of the global batch (default 32); every "
                     "rank's shard must be whole chunks, and runs agree for the same chunk and batch")
          ->check(whole_number(1));
  auto* tp_chunk_option =
      app.add_option("--tp-chunk", c.tp_chunk,
                     "--reproducible with tensor parallelism (needed for --tp > 1): every Linear "
                     "whose width S divides sums it in chunks of S features, added exactly, so "
                     "that a split over --tp ranks gives the same bits; give the same S to every "
                     "run that must agree, --tp 1 included; each rank's shard of a split layer "
                     "must be whole chunks (e.g. 32)")
          ->check(whole_number(1));
  auto* epochs = app.add_option("--epochs", c.epochs, "passes over the training data")
                     ->capture_default_str()
                     ->check(whole_number(1));
  auto* steps = app.add_option("--steps", c.steps, "stop after this many training steps")
                    ->check(whole_number(1));
  epochs->excludes(steps);
  app.add_option("--batch-size", c.batch_size, "global batch size")
      ->capture_default_str()
      ->check(whole_number(1));
  app.add_option("--optimizer", optimizer, "sgd | adam | adamw")->capture_default_str();
  auto* lr_option = app.add_option("--lr", lr, "learning rate (default 0.01 for sgd, 0.001 for adam/adamw)");
  std::string lr_schedule = "constant";
  app.add_option("--lr-schedule", lr_schedule,
                 "constant | cosine (to --lr-min at the last step, as PyTorch's CosineAnnealingLR)")
      ->capture_default_str();
  app.add_option("--lr-min", c.lr_schedule.lr_min, "cosine: the learning rate at the last step")
      ->capture_default_str();
  app.add_option("--lr-warmup-steps", c.lr_schedule.warmup,
                 "steps of linear warm-up from --lr / N to --lr before the schedule")
      ->capture_default_str();
  app.add_option("--momentum", c.optimizer.momentum, "SGD momentum")->capture_default_str();
  app.add_flag("--nesterov", c.optimizer.nesterov, "Nesterov momentum (SGD)");
  app.add_option("--weight-decay", c.optimizer.weight_decay, "weight decay")
      ->capture_default_str();
  app.add_flag("--no-decay-bias-norm", c.optimizer.no_decay_bias_norm,
               "no weight decay on biases and normalisation parameters");
  app.add_option("--init", init,
                 "kaiming-uniform | kaiming-normal | xavier-uniform | xavier-normal | "
                 "torch-default")
      ->capture_default_str();
  app.add_flag("--no-shuffle", no_shuffle, "keep the data order");
  app.add_flag("--no-eval", no_eval, "skip the evaluation on the test set");
  app.add_option("--metrics", c.metrics, "write JSON lines (training log, evaluation, summary)");
  app.add_option("--trace", c.trace,
                 "write a timeline (Chrome trace-event JSON for Perfetto or chrome://tracing): "
                 "a lane per rank with layers, buckets, optimizer and data loading; under "
                 "mpirun one file per process, PATH with -rankN before .json");
  app.add_option("--kernel-shapes", c.kernel_shapes,
                 "write a Markdown table of every kernel launch (name, items per launch, time; "
                 "each launch fenced, so the run is slower): how kernels would fill a GPU");
  app.add_option("--log-every", c.log_every, "a training log line every N steps (0: none)")
      ->capture_default_str()
      ->check(whole_number());
  app.add_option("--warmup-steps", c.warmup_steps, "steps excluded from samples_per_sec")
      ->capture_default_str()
      ->check(whole_number());
  std::string gemm = "auto";
  app.add_option("--gemm", gemm, "auto | vendor | portable")->capture_default_str();
  std::string strategy = "auto";
  app.add_option("--strategy", strategy,
                 "auto | local | dp | pipeline | tensor | hybrid | plan (auto: dp when there is "
                 "more than one rank, hybrid when --pp, --tp or --zero is given; plan: the layout "
                 "strata-plan ranks first, printed with the options that repeat it, on "
                 "--plan-profile or on this machine's calibration, made on first use and cached)")
      ->capture_default_str();
  app.add_option("--plan-profile", c.plan_profile,
                 "--strategy plan: the machine profile to plan on (default: this machine's, "
                 "calibrated on first use and cached under ~/.cache/strata/profiles; "
                 "`strata-plan calibrate --output FILE` writes one; docs/planner.md)");
  app.add_option("--comm", c.comm,
                 "communicator: auto | self | threads | mpi | hierarchical | nccl (auto: nccl "
                 "between processes on GPUs, mpi between processes, threads inside one; "
                 "--version lists this build's)")
      ->capture_default_str();
  app.add_option("--device", c.device,
                 "GPU builds: the device this process uses, of those it sees (default: the "
                 "node-local rank modulo the devices)")
      ->check(whole_number(0, 1023));
  app.add_option("--ranks", c.ranks,
                 "thread ranks per process (under mpirun/srun: per MPI process)")
      ->capture_default_str()
      ->check(whole_number(1, 1024));
  app.add_option("--threads", c.threads,
                 "Kokkos threads per rank (default: the cores of this node / ranks on it)")
      ->check(whole_number(1, 4096));
  app.add_option("--bucket-mb", c.bucket_mb,
                 "gradient bucket size in MiB for the sums over data-parallel ranks, of every "
                 "strategy (0: one bucket)")
      ->capture_default_str()
      ->check(number_in(0.0, 1e6));
  // A plain bool flag: CLI11 converts a value given to it (--no-overlap=x)
  // with a ParseError; a callback flag's std::stoll threw std::invalid_argument.
  app.add_flag("--no-overlap", no_overlap,
               "sum gradients over data-parallel ranks after backward instead of during it");
  app.add_option("--accumulate", c.accumulate,
                 "gradient accumulation: each optimizer step sums the gradients of K batches of "
                 "--batch-size samples (a step sees K x --batch-size samples; --strategy dp "
                 "and local)")
      ->capture_default_str()
      ->check(whole_number(1, 1 << 20));
  std::string precision = "fp32";
  app.add_option("--precision", precision,
                 "fp32 | bf16 | fp16: activations kept in 16 bits, working weights "
                 "rounded to 16 bits, fp32 master weights")
      ->capture_default_str();
  app.add_option("--grad-compression", c.grad_compression,
                 "none | bf16 | fp16: gradient buckets travel in 16 bits, summed in float")
      ->capture_default_str();
  app.add_option("--clip-grad-norm", c.clip_grad_norm,
                 "clip gradients to this global L2 norm (0: no clipping)")
      ->capture_default_str();
  app.add_option("--loss-scale", c.loss_scale,
                 "auto (dynamic for fp16, none otherwise) | dynamic | none")
      ->capture_default_str();
  auto* growth_option =
      app.add_option("--loss-scale-growth-interval", c.loss_scale_growth_interval,
                     "dynamic loss scaling: finite steps in a row before the scale doubles")
          ->capture_default_str()
          ->check(whole_number(1, 1000000000));
  app.add_option("--max-skipped-steps", c.max_skipped_steps,
                 "dynamic loss scaling: stop (exit 4) after this many steps in a row skipped "
                 "for overflowing gradients")
      ->capture_default_str()
      ->check(whole_number(1, 1000000000));
  app.add_flag("--verbose-ranks", c.verbose_ranks, "every rank prints, not only rank 0");
  app.add_option("--dp", c.dp, "mesh: data-parallel ranks (default: the ranks left over)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--pp,--stages", c.pp,
                 "mesh: pipeline stages (--strategy pipeline: default every rank)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--tp", c.tp, "mesh: tensor-parallel ranks (--strategy tensor: default every rank)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--micro-batches", c.micro_batches,
                 "pipeline: split each batch of --batch-size samples into M micro-batches (a "
                 "step sees --batch-size samples, not M times more; default: 2 x stages with a "
                 "pipeline, else 1)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--schedule", c.schedule, "pipeline: gpipe | 1f1b")->capture_default_str();
  std::string cuts;
  app.add_option("--stage-cuts", cuts,
                 "pipeline: first layer index of stages 1.. (e.g. 2,4; default: balanced)");
  app.add_option("--balance", c.balance, "pipeline: balance stages by params | flops")
      ->capture_default_str();
  app.add_option("--zero", c.zero,
                 "1: shard optimizer state and gradient sums over data-parallel ranks (ZeRO-1; "
                 "reduce-scattered in units of --bucket-mb during backward); 2: and keep no whole "
                 "gradient buffer, only two units of it (ZeRO-2); 3: nor a whole parameter buffer, "
                 "each unit (at most one layer) gathered just before its layers run (ZeRO-3)")
      ->check(CLI::Range(0, 3));
  app.add_flag("--sequence-parallel", c.sequence_parallel,
               "with --tp: LayerNorm, Dropout and the residual stream run on each tensor rank's "
               "shard of the sequence (Megatron's sequence parallelism: all-gather and "
               "reduce-scatter at the tensor-parallel pairs instead of allreduce; less activation "
               "memory)");
  app.add_option("--collective-timeout", c.collective_timeout_s,
                 "seconds a collective may wait for the other ranks before the run ends with an "
                 "error naming the lost ranks and their hosts, the operation, the step and the "
                 "checkpoint to resume from (exit code 4; every surviving rank exits within twice "
                 "this; default: STRATA_COMM_TIMEOUT, else 300)")
      ->check(CLI::PositiveNumber);
  app.add_option("--memory-budget-mb", c.memory_budget_mb,
                 "refuse to start when a rank needs more MiB for parameters, gradients, "
                 "optimizer state and activations (runs the mesh engine, as --pp/--tp/--zero "
                 "do; with --strategy dp a data-parallel-only mesh)")
      ->check(CLI::Range(0.0, 1e12));
  app.add_option("--checkpoint-dir", c.checkpoint_dir,
                 "write checkpoints here (atomically; a 'latest' file names the newest)");
  app.add_option("--checkpoint-every", c.checkpoint_every,
                 "steps between checkpoints (default: every epoch end; always at the end)")
      ->check(whole_number());
  app.add_option("--keep-checkpoints", c.keep_checkpoints, "checkpoints kept")
      ->capture_default_str()
      ->check(whole_number(1, 1000000));
  app.add_flag("--resume", c.resume, "continue from the latest checkpoint in --checkpoint-dir");
  app.add_option("--resume-from", c.resume_from, "continue from this checkpoint file");
  app.add_option("--init-from", c.init_from,
                 "start from the weights of this safetensors file (PyTorch state_dict names; "
                 "docs/weights.md)");
  app.add_flag("--strict,!--no-strict", c.strict,
               "--init-from: refuse a file with missing, unexpected or mis-shaped tensors "
               "(default); --no-strict loads what matches and reports the rest");
  app.add_option("--export", c.export_file,
                 "write the trained weights (and BatchNorm statistics) to this safetensors file, "
                 "under the names PyTorch's state_dict uses");
  app.add_option("--export-dtype", c.export_dtype, "f32, bf16, f16 or f64 (--export)")
      ->capture_default_str();
  app.add_flag("--quiet,-q", c.quiet, "print only errors and the final result");
  app.add_flag("--version", version, "print the build configuration and exit");

  if (!parse_cli(app, args)) return std::nullopt;
  if (version) {
    std::cout << build_info();
    return std::nullopt;
  }

  finish_model_data_options(model_data, c);
  check_data_rules(c);
  c.optimizer.kind = parse_optimizer(optimizer);
  c.optimizer.lr = lr_option->count() > 0 ? lr : (c.optimizer.kind == OptimizerKind::sgd ? 0.01 : 0.001);
  c.lr_schedule.kind = parse_lr_schedule(lr_schedule);
  c.lr_schedule.lr = c.optimizer.lr;
  c.init = parse_init(init);
  c.shuffle = !no_shuffle;
  c.overlap = !no_overlap;
  c.evaluate = !no_eval;
  STRATA_REQUIRE(!c.resume || !c.checkpoint_dir.empty(), config,
                 "--resume needs --checkpoint-dir (or use --resume-from FILE)");
  STRATA_REQUIRE(!(c.resume && !c.resume_from.empty()), config,
                 "--resume and --resume-from contradict each other; give one");
  STRATA_REQUIRE(c.init_from.empty() || (!c.resume && c.resume_from.empty()), config,
                 "--init-from starts a new run from weights; --resume and --resume-from continue "
                 "a run from its checkpoint: give one");
  parse_weight_dtype(c.export_dtype, "--export-dtype");
  STRATA_REQUIRE(c.checkpoint_every == 0 || !c.checkpoint_dir.empty(), config,
                 "--checkpoint-every needs --checkpoint-dir");
  c.strategy = parse_strategy(strategy);
  const bool plan = c.strategy == StrategyKind::plan;
  STRATA_REQUIRE(c.plan_profile.empty() || plan, config,
                 "--plan-profile applies to --strategy plan");
  STRATA_REQUIRE(!plan || (c.dp == 0 && c.pp == 0 && c.tp == 0 && c.zero == 0 &&
                                          c.micro_batches == 0 && !c.recompute &&
                                          !c.sequence_parallel && cuts.empty()),
                 config, "--strategy plan chooses --dp, --pp, --tp, --zero, --micro-batches, "
                 "--sequence-parallel and --recompute itself: leave them out (or give them all "
                 "with --strategy hybrid)");
  STRATA_REQUIRE(!c.sequence_parallel || plan || c.tp > 1, config,
                 "--sequence-parallel shards the sequence over the tensor-parallel ranks: give "
                 "--tp 2 or more with it");
  STRATA_REQUIRE(c.schedule == "gpipe" || c.schedule == "1f1b", config,
                 "--schedule: unknown pipeline schedule '", c.schedule, "' (expected gpipe or 1f1b)");
  STRATA_REQUIRE(c.balance == "params" || c.balance == "flops", config,
                 "--balance: unknown value '", c.balance, "' (expected params or flops)");
  if (!cuts.empty()) c.stage_cuts = parse_positive_list("--stage-cuts", cuts);
  check_factors(c.strategy, mesh_factors(c));
  STRATA_REQUIRE(!(model_parallel(c) && c.accumulate > 1), config,
                 "--accumulate K adds K batches to a step and is for --strategy dp; pipelines "
                 "split one batch with --micro-batches M instead (a step then sees --batch-size "
                 "samples)");
  STRATA_REQUIRE(c.micro_batches <= c.batch_size, config, "--micro-batches ", c.micro_batches,
                 " splits each batch of --batch-size ", c.batch_size,
                 " samples: there would be empty micro-batches (give at most ", c.batch_size,
                 ", or a larger --batch-size)");
  STRATA_REQUIRE(precision == "fp32" || precision == "bf16" || precision == "fp16", config,
                 "--precision: unknown value '", precision, "' (expected fp32, bf16 or fp16)");
  c.precision = parse_precision(precision);
  if (gemm != "auto") c.gemm = parse_gemm_backend(gemm);
  STRATA_REQUIRE(c.grad_compression == "none" || c.grad_compression == "bf16" ||
                     c.grad_compression == "fp16",
                 config, "--grad-compression: unknown value '", c.grad_compression,
                 "' (expected none, bf16 or fp16)");
  STRATA_REQUIRE(c.loss_scale == "auto" || c.loss_scale == "dynamic" || c.loss_scale == "none",
                 config, "--loss-scale: unknown value '", c.loss_scale,
                 "' (expected auto, dynamic or none)");
  STRATA_REQUIRE(growth_option->count() == 0 || loss_scaling(c), config,
                 "--loss-scale-growth-interval needs dynamic loss scaling (--precision fp16 or "
                 "--loss-scale dynamic)");
  STRATA_REQUIRE(c.clip_grad_norm >= 0 && std::isfinite(c.clip_grad_norm), config,
                 "--clip-grad-norm must be finite and >= 0, got ", c.clip_grad_norm);
  STRATA_REQUIRE(chunk_option->count() == 0 || c.reproducible, config,
                 "--chunk applies to --reproducible runs (give both)");
  STRATA_REQUIRE(tp_chunk_option->count() == 0 || c.reproducible, config,
                 "--tp-chunk applies to --reproducible runs (give both)");
  {
    GradSyncOptions sync;
    sync.compression = parse_grad_compression(c.grad_compression);
    validate(sync, loss_scaling(c));
  }
  // Validates the optimizer settings now rather than after loading data.
  validate(c.optimizer);
  validate(c.lr_schedule);  // after the learning rate itself
  return c;
}

}  // namespace strata::app
