#include "apps/train/setup.hpp"

#include "backends/error.hpp"
#include "backends/kernel_shapes.hpp"
#include "backends/ranks.hpp"
#include "backends/trace.hpp"
#include "data/bpe.hpp"
#include "data/dataset_source.hpp"
#include "data/loader.hpp"
#include "data/text.hpp"
#include "layers/embedding.hpp"
#include "planner/calibrate.hpp"
#include "planner/search.hpp"
#include "strategies/checkpoint.hpp"
#include "training/synthetic_data.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <thread>

namespace strata::app {

namespace {
std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// --precision, --clip-grad-norm and --loss-scale, for either strategy.
void set_mixed_precision(const TrainConfig& c, MixedPrecisionOptions& o) {
  o.precision = c.precision;
  o.clip_grad_norm = c.clip_grad_norm;
  o.loss_scaling = loss_scaling(c);
  o.scaler.growth_interval = c.loss_scale_growth_interval;
}

// The mesh of a configuration on `world` ranks: the factors given, the
// strategy's default for the others, and the data-parallel factor last.
MeshShape mesh_shape(const TrainConfig& c, int world) {
  return mesh_for(c.strategy, mesh_factors(c), world);
}

}  // namespace

// Processes of this job on this node, from the launcher's environment.
int local_processes() {
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE",
                        "MV2_COMM_WORLD_LOCAL_SIZE"})
    if (const char* s = std::getenv(v)) return std::max(1, std::atoi(s));
  return 1;
}

// --threads, or the node's cores shared by its processes and thread ranks.
int threads_per_rank(const TrainConfig& c) {
  if (c.threads > 0) return c.threads;
  if (const char* omp = std::getenv("OMP_NUM_THREADS"))
    return std::max(1, std::atoi(omp) / c.ranks);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / (c.ranks * local_processes()));
}

int ctx_threads_per_rank(const TrainConfig& c) {
  return std::max(1, strata::kokkos_host_threads() / c.ranks);
}

bool has_kokkos_threads_option(const std::vector<char*>& kokkos_args) {
  for (const char* a : kokkos_args)
    if (a && (std::strncmp(a, "--kokkos-threads", 16) == 0 ||
              std::strncmp(a, "--kokkos-num-threads", 20) == 0))
      return true;
  return false;
}

// GNU OpenMP threads (Kokkos' and OpenBLAS's) spin while they wait for work,
// which is fastest on a machine of one's own and ruinous on a busy one (a
// 2-thread W2 run lost half its speed next to a compilation; a 4-process
// test on 2 cores ran 100x slower). The policy is read when the OpenMP
// runtime loads, before main: all strata-train can do is say so.
void wait_policy_hint(const TrainConfig& c, const comm::Communicator& world) {
#ifdef KOKKOS_ENABLE_OPENMP
  if (c.quiet || world.rank() != 0 || std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = c.ranks * threads_per_rank(c) * local_processes();
  double load = 0;
  std::ifstream("/proc/loadavg") >> load;
  if (threads <= cores && load < cores - 0.5) return;
  std::cerr << "strata-train: note: " << threads << " OpenMP threads on " << cores
            << " cores, load average " << fmt("%.1f", load)
            << "; waiting OpenMP threads spin and slow each other down on a busy machine. "
               "Start with OMP_WAIT_POLICY=PASSIVE to let them sleep (it must be set before "
               "strata-train starts).\n";
#else
  (void)c;
  (void)world;
#endif
}

// `model`: the single-rank model (not built), for its input and output shapes.
data::Split load_data(const TrainConfig& c, const Sequential<float>& model,
                      data::Normalizer* normalizer) {
  const std::size_t in = model.in_features(), out = model.out_features();
  // How errors name the model's ends.
  const std::string first = c.model_file.empty()
                                ? "--layers starts with width " + std::to_string(in)
                                : "the model of " + c.model_file + " takes inputs of shape " +
                                      model.shape(0).str() + " (" + std::to_string(in) + " values)";
  const std::string last = c.model_file.empty()
                               ? "--layers ends with width " + std::to_string(out)
                               : "the model of " + c.model_file + " has outputs of shape " +
                                     model.shape(model.num_layers()).str();
  const auto task = c.loss == LossKind::cross_entropy ? data::CsvTask::classification
                                                       : data::CsvTask::regression;
  data::Split s;
  Normalize norm = c.normalize;
  const data::DatasetSource source = data::parse_dataset_source(c.dataset);
  const bool csv = source.kind == data::SourceKind::csv;
  const bool synthetic = source.kind == data::SourceKind::synthetic;
  if (source.kind == data::SourceKind::fashion_mnist) {
    s = data::load_fashion_mnist(c.data_dir.empty() ? data::default_fashion_mnist_dir()
                                                    : c.data_dir);
    if (norm == Normalize::automatic) norm = Normalize::global;
  } else if (synthetic) {
    STRATA_REQUIRE(c.samples >= 2 || c.test_fraction == 0, config,
                   "--samples must be at least 2 to hold out a test set");
    s = data::split_tail(synthetic_data(model, c.loss, c.samples, c.seed),
                         c.evaluate ? c.test_fraction : 0.0);
    if (norm == Normalize::automatic) norm = Normalize::none;
  } else if (source.kind == data::SourceKind::text) {
    const std::string& path = source.path;
    STRATA_REQUIRE(model.shape(0).rank() == 1, config, first,
                   ": text data gives windows of token ids, input = [T]");
    // Byte tokens, or the ids of a BPE file; the model must embed exactly that vocabulary.
    const std::string text = data::read_text(path);
    std::vector<std::int32_t> tokens;
    std::size_t vocab = 256;
    std::string source = "byte-level text has 256 token ids";
    if (!c.tokenizer.empty()) {
      const data::Bpe bpe = data::read_bpe(c.tokenizer);
      vocab = bpe.vocab();
      source = "the tokenizer " + c.tokenizer + " has " + std::to_string(vocab) + " token ids";
      tokens = data::encode(bpe, text);
    } else {
      tokens = data::byte_tokens(text);
    }
    if (const std::size_t embeds = embedding_vocabulary(model.layer(0)))
      STRATA_REQUIRE(embeds == vocab, config, first, " and embeds a vocabulary of ", embeds,
                     ", but ", source, " (the model file's vocab must be ", vocab,
                     c.tokenizer.empty() ? "; a model for a BPE vocabulary needs --tokenizer)" : ")");
    s = data::text_windows(tokens, in, vocab, c.evaluate ? c.test_fraction : 0.0, path);
    norm = Normalize::none;  // token ids
  } else {
    s = data::split_tail(data::read_csv(source.path, task, 0, out), c.evaluate ? c.test_fraction : 0.0);
    if (norm == Normalize::automatic) norm = Normalize::per_feature;
  }
  if (norm != Normalize::none) {
    const auto n = data::Normalizer::fit(s.train, norm == Normalize::per_feature);
    n.apply(s.train);
    if (s.test.size() > 0) n.apply(s.test);
    if (normalizer) *normalizer = n;
  }
  // Sample shapes: IDX images carry theirs, a CSV takes --input-shape,
  // synthetic data the model's.
  const Shape& model_in = model.shape(0);
  if (!c.input_shape.empty()) {
    STRATA_REQUIRE(csv, config, "--input-shape gives CSV data a "
                   "shape; ", s.train.name, " has samples of shape ", data::shape_str(s.train),
                   synthetic ? " (synthetic data takes the model's input shape)" : "");
    data::set_shape(s.train, c.input_shape, "--input-shape");
    s.test.shape = s.train.shape;
  }
  // The model must fit the data.
  STRATA_REQUIRE(s.train.features == in, config, first, " but ",
                 s.train.name, " has ", s.train.features, " features per sample",
                 task == data::CsvTask::regression && csv
                     ? " (with --loss mse the last " + std::to_string(out) +
                           " columns of the CSV are the targets: as many as the output width)"
                     : std::string());
  // An image model and image data must agree on the shape, not only the size.
  STRATA_REQUIRE(s.train.shape.size() <= 1 || model_in.rank() <= 1 ||
                     s.train.shape == model_in.dims(),
                 config, first, " but ", s.train.name, " has samples of shape ",
                 data::shape_str(s.train),
                 csv ? " (--input-shape)" : "",
                 " (the model file's input = [...] must be the data's shape)");
  if (task == data::CsvTask::classification && s.train.label_width > 1) {
    const std::size_t p = s.train.label_width;  // labels per sample: one per position
    STRATA_REQUIRE(out % p == 0 && out / p >= s.train.classes, config, last, " but ",
                   s.train.name, " has ", p, " positions of ", s.train.classes,
                   " classes per sample (the output needs {", p, ", ", s.train.classes,
                   "}: one logit per token id at each position)");
  } else if (task == data::CsvTask::classification) {
    STRATA_REQUIRE(s.train.classes <= out, config, last, " but ",
                   s.train.name, " has ", s.train.classes,
                   " classes (the output layer needs one output per class)");
  } else {
    STRATA_REQUIRE(s.train.target_width == out, config, last, " but ", s.train.name, " has targets of width ", s.train.target_width);
  }
  return s;
}

GemmBackend gemm_backend(const TrainConfig& c) {
  if (c.gemm) return *c.gemm;
  return Blas::vendor_available() ? GemmBackend::vendor : GemmBackend::portable;
}

// What must match for a checkpoint to be resumed by this configuration.
// The model itself is compared tensor by tensor (strategies/checkpoint_state.hpp);
// an MLP's options are compared too, as Strata 0.1's checkpoints hold them.
std::string checkpoint_config(const TrainConfig& c) {
  nlohmann::json j{{"format", "strata-train"},
                   {"dataset", c.dataset},
                   {"loss", to_string(c.loss)},
                   {"optimizer", to_string(c.optimizer.kind)},
                   {"batch_size", c.batch_size},
                   {"accumulate", c.accumulate},
                   {"shuffle", c.shuffle},
                   {"seed", c.seed}};
  if (c.seq_len > 0) j["seq_len"] = c.seq_len;
  if (!c.tokenizer.empty()) j["tokenizer"] = c.tokenizer;
  if (c.model_file.empty()) {
    j["layers"] = c.layers;
    j["activation"] = to_string(c.activation);
    j["dropout"] = c.dropout;
  }
  return j.dump();
}

std::vector<std::string> option_notes(const TrainConfig& c, const ModelSpec& model) {
  std::vector<std::string> notes;
  bool blocks = false;
  for (const auto& l : model.layers) blocks |= !l.layers.empty();
  if (c.recompute && !blocks)
    notes.push_back("--recompute: " + model.source + " has no blocks (\"residual\" or \"block\" "
                    "layers), so nothing is recomputed");
  if (model.sync_batchnorm) {
    bool norms = false;
    std::function<void(const std::vector<LayerSpec>&)> find = [&](const std::vector<LayerSpec>& ls) {
      for (const auto& l : ls) {
        norms |= l.type == "batchnorm";
        find(l.layers);
      }
    };
    find(model.layers);
    if (!norms) notes.push_back("SyncBatchNorm: " + model.source + " has no batchnorm layers, so "
                                "nothing is synchronised");
  }
  if (c.optimizer.no_decay_bias_norm && c.optimizer.weight_decay == 0)
    notes.push_back("--no-decay-bias-norm changes nothing without --weight-decay");
  return notes;
}

// What the strategy gets: the model, the optimizer and the parallel layout.
EngineOptions engine_options(const TrainConfig& c, const ModelSpec& model, int world) {
  EngineOptions o;
  o.model = model;
  o.init = c.init;
  o.seed = c.seed;
  o.loss = c.loss;
  o.optimizer = c.optimizer;
  o.model_parallel = model_parallel(c);
  o.recompute = c.recompute;
  if (c.reproducible) o.reproducible_chunk = c.chunk > 0 ? c.chunk : default_chunk;
  o.reproducible_tp_chunk = c.tp_chunk;
  GradSyncOptions sync;
  sync.bucket_bytes = static_cast<std::size_t>(c.bucket_mb * 1024 * 1024);
  sync.overlap = c.overlap;
  sync.compression = parse_grad_compression(c.grad_compression);
  static_cast<GradSyncOptions&>(o.data) = sync;
  set_mixed_precision(c, o.data);
  if (o.model_parallel) {
    ModelParallelOptions& m = o.mesh;
    m.mesh = mesh_shape(c, world);
    m.micro_batches = c.micro_batches > 0 ? c.micro_batches : planner::default_micro_batches(m.mesh.pp);
    m.schedule = parse_schedule(c.schedule);
    m.cuts = c.stage_cuts;
    m.balance = parse_balance(c.balance);
    m.zero = c.zero;
    m.sequence_parallel = c.sequence_parallel;
    m.memory_budget = static_cast<std::size_t>(c.memory_budget_mb * 1024 * 1024);
    static_cast<GradSyncOptions&>(m) = sync;
    set_mixed_precision(c, m);
  }
  return o;
}

planner::PlanRequest plan_request(const TrainConfig& c, const ModelSpec& model, int ranks) {
  planner::PlanRequest r;
  r.model = model;
  r.loss = c.loss;
  r.optimizer = c.optimizer;
  r.precision = c.precision;
  r.batch = c.batch_size;
  r.ranks = ranks;
  r.memory_budget = static_cast<std::size_t>(c.memory_budget_mb * 1024 * 1024);
  return r;
}

TrainConfig planned_config(const TrainConfig& c, const ModelSpec& model,
                           const planner::MachineProfile& profile, int world, std::string* summary) {
  const planner::PlanRequest r = plan_request(c, model, world);
  const planner::CostModel cost(r, profile);
  const std::vector<planner::Prediction> plans = planner::search(cost, world, c.batch_size);
  STRATA_REQUIRE(!plans.empty() && plans.front().rejected.empty(), config,
                 "--strategy plan: no layout of ", world, " rank(s) fits",
                 plans.empty() ? std::string()
                               : " (e.g. " + plans.front().layout.str() + ": " +
                                     plans.front().rejected + ")");
  const planner::Layout& l = plans.front().layout;
  TrainConfig t = c;
  t.plan_profile.clear();
  t.dp = l.mesh.dp, t.pp = l.mesh.pp, t.tp = l.mesh.tp;
  t.recompute = l.recompute;
  // Plain data parallelism runs on the engine its explicit options pick
  // (--strategy auto: the data-parallel one), as the layout it was
  // measured and predicted as; the rest on the mesh.
  const bool plain = l.mesh.pp == 1 && l.mesh.tp == 1 && l.zero == 0 && l.micro_batches == 1 &&
                     !l.sequence_parallel && c.memory_budget_mb <= 0;
  std::string same;
  if (plain) {
    t.strategy = StrategyKind::automatic;
    t.micro_batches = 0;
    same = "--dp " + std::to_string(t.dp);
  } else {
    t.strategy = StrategyKind::hybrid;
    t.micro_batches = l.micro_batches;
    t.schedule = to_string(l.schedule);
    t.zero = l.zero;
    t.sequence_parallel = l.sequence_parallel;
    same = "--strategy hybrid --dp " + std::to_string(t.dp) + " --pp " + std::to_string(t.pp) +
           " --tp " + std::to_string(t.tp) + " --micro-batches " + std::to_string(t.micro_batches) +
           " --schedule " + t.schedule + " --zero " + std::to_string(t.zero) +
           (t.sequence_parallel ? " --sequence-parallel" : "");
  }
  if (summary) {
    char rate[64];
    std::snprintf(rate, sizeof rate, "%.0f samples/s, %.1f MiB per rank", plans.front().samples_per_s,
                  plans.front().memory.total() / 1048576.0);
    *summary = "plan: " + l.str() + " (predicted on " + profile.name + ": " + rate + "; the same as " +
               same + (t.recompute ? " --recompute" : "") + ")";
  }
  return t;
}

std::vector<std::string> dry_run_report(const TrainConfig& c, const ModelSpec& model, int ranks) {
  planner::PlanRequest r = plan_request(c, model, ranks);
  r.ranks_per_node = std::min(ranks, c.ranks * local_processes());
  // Memory needs no rates: the profile is this node's memory and cores, with
  // unit rates the report does not use (it prints no time).
  planner::MachineProfile node;
  node.name = "this node";
  node.nodes = ranks;
  node.devices_per_node = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  node.memory_per_node = planner::node_memory();
  node.gemm_flops_fp32 = node.gemm_flops_16 = node.gemm_half_flops = node.memory_bandwidth = 1;
  node.intra_node = node.inter_node = planner::Link{0, 1};
  const planner::CostModel cost(r, node);
  planner::Layout l;
  l.recompute = c.recompute;
  if (model_parallel(c)) {
    const ModelParallelOptions m = engine_options(c, model, ranks).mesh;
    l.mesh = m.mesh;
    l.micro_batches = m.micro_batches;
    l.schedule = m.schedule;
    l.zero = m.zero;
    l.sequence_parallel = m.sequence_parallel;
  } else {
    l.mesh.dp = ranks;  // every rank data parallel
  }
  const planner::Prediction p = cost.predict(l);
  std::vector<std::string> lines{"layout: " + l.str() + " on " + std::to_string(ranks) + " rank(s)"};
  if (p.rejected.empty() || p.memory.total() > 0)
    lines.push_back("memory per rank, predicted (the planner's accounting of the engine's "
                    "allocations; stage " + std::to_string(p.stage_with_most_memory) +
                    ", the rank that needs the most): " + p.memory.str());
  // A budget the run would enforce fails now; without one, the node's
  // memory is only a warning (the run may land on bigger nodes).
  STRATA_REQUIRE(p.rejected.empty() || c.memory_budget_mb <= 0 ||
                     p.rejected.find("budget") == std::string::npos,
                 config, "memory budget of ", c.memory_budget_mb, " MiB per rank (--memory-budget-mb) "
                 "exceeded: ", p.rejected);
  if (!p.rejected.empty()) lines.push_back("warning: " + p.rejected + " (on this node)");
  return lines;
}

// --trace PATH, or PATH with -rankN before .json for each MPI process.
std::string trace_path(const std::string& path, const comm::Communicator& world) {
  if (world.size() == 1) return path;
  const std::string suffix = "-rank" + std::to_string(world.rank());
  const auto dot = path.rfind(".json");
  return dot == std::string::npos ? path + suffix : path.substr(0, dot) + suffix + ".json";
}

void validate_layout(const TrainConfig& c, const ModelSpec& model, int processes) {
  const bool multi = c.ranks > 1 || processes > 1;
  STRATA_REQUIRE(c.strategy != StrategyKind::plan || c.ranks == 1 || processes == 1, config,
                 "--strategy plan runs on thread ranks of one process or on MPI processes "
                 "with one rank each; not on --ranks ", c.ranks, " x ", processes, " processes");
  STRATA_REQUIRE(!(c.strategy == StrategyKind::local && multi), config,
                 "--strategy local runs one rank, but ", c.ranks * processes,
                 " ranks were requested (use --strategy dp)");
  STRATA_REQUIRE(c.accumulate == 1 || c.strategy != StrategyKind::local, config,
                 "--accumulate needs --strategy dp (or auto)");
  // Meshes split the world; thread ranks inside several MPI processes form a
  // hierarchical communicator, which cannot be split.
  STRATA_REQUIRE(!(model_parallel(c) && c.ranks > 1 && processes > 1), config,
                 "--strategy ", to_string(c.strategy), " with --pp/--tp/--zero runs on thread ranks of one "
                 "process or on MPI processes with one rank each; not on --ranks ", c.ranks,
                 " x ", processes, " processes");
  if (model_parallel(c))
    validate_mesh(engine_options(c, model, c.ranks * processes).mesh.mesh, c.ranks * processes);
  // Without a mesh every rank is a data-parallel rank: --dp can only agree.
  STRATA_REQUIRE(model_parallel(c) || c.dp == 0 || c.dp == c.ranks * processes, config,
                 "--dp ", c.dp, " but ", c.ranks * processes, " rank(s) were started (without "
                 "--pp/--tp/--zero every rank is data parallel: start ", c.dp,
                 " with --ranks or mpirun -np)");
}

void prepare_outputs(const TrainConfig& c, const comm::Communicator& world) {
  // An unusable checkpoint directory fails now rather than after the first
  // stretch of training.
  if (!c.checkpoint_dir.empty() && world.rank() == 0) checkpoint::prepare_dir(c.checkpoint_dir);
  // So does an --export file that cannot be written (its temporary, tried now).
  if (!c.export_file.empty() && world.rank() == 0) {
    const std::string probe = c.export_file + ".tmp";
    const bool existed = static_cast<bool>(std::ifstream(probe));
    const bool ok = static_cast<bool>(std::ofstream(probe, std::ios::binary | std::ios::app));
    if (!existed) std::remove(probe.c_str());
    STRATA_REQUIRE(ok, runtime, "--export: cannot write '", c.export_file, "' (its directory "
                   "must exist and be writable; checked before training)");
  }
}

void start_recording(const TrainConfig& c, const comm::Communicator& world) {
  if (!c.trace.empty()) {
    // Fail on an unwritable path now, not after training.
    std::ofstream probe(trace_path(c.trace, world), std::ios::app);
    STRATA_REQUIRE(probe.good(), config, "--trace: cannot write '", trace_path(c.trace, world), "'");
    trace::start();
  }
  if (!c.kernel_shapes.empty()) {
    std::ofstream probe(c.kernel_shapes, std::ios::app);
    STRATA_REQUIRE(probe.good(), config, "--kernel-shapes: cannot write '", c.kernel_shapes, "'");
    kernel_shapes::start();
  }
}

void finish_recording(const TrainConfig& c, const comm::Communicator& world) {
  if (!c.trace.empty()) trace::write(trace_path(c.trace, world), world.rank());
  if (!c.kernel_shapes.empty()) {
    kernel_shapes::stop();
    if (world.rank() == 0) kernel_shapes::write(c.kernel_shapes);
  }
}

std::string restore_or_import(const TrainConfig& c, Engine& engine, const std::string& prefix,
                              Position* start, std::string* resume_file) {
  // A checkpoint holds the whole model in single-rank layout: any strategy
  // and mesh resumes it.
  *resume_file =
      !c.resume_from.empty() ? c.resume_from : c.resume ? checkpoint::latest(c.checkpoint_dir) : "";
  if (!resume_file->empty()) {
    auto [snapshot, position] = read_checkpoint(*resume_file, checkpoint_config(c), engine.table());
    engine.restore(snapshot);
    *start = position;
  }
  if (c.init_from.empty()) return "";
  const ImportReport r = load_weights(engine, c.init_from, c.strict);
  std::string note = "initialised from " + c.init_from + ": " + std::to_string(r.loaded) + " tensors";
  auto add = [&](const std::vector<std::string>& v, const char* kind) {
    for (const std::string& s : v) note += "\n" + prefix + "  " + kind + ": " + s;
  };
  add(r.missing, "missing, kept the model's initialisation");
  add(r.unexpected, "unexpected, skipped");
  add(r.mismatched, "of another shape, skipped");
  return note;
}

TrainerOptions trainer_options(const TrainConfig& c, std::size_t batch, const data::Dataset& train,
                               const std::string& resume_file) {
  TrainerOptions o;
  o.batch = batch;
  o.accumulate = c.accumulate;
  o.steps = c.steps;
  o.epochs = c.epochs;
  o.shuffle = c.shuffle;
  o.seed = c.seed;
  o.drop_last = c.reproducible;
  o.augment = data::Augment{c.random_crop, c.random_flip, train.zero};
  o.lr_schedule = c.lr_schedule;
  o.evaluate = c.evaluate;
  o.eval_every = c.eval_every;
  if (!c.checkpoint_dir.empty())
    o.checkpoint = CheckpointTarget{c.checkpoint_dir, c.keep_checkpoints, checkpoint_config(c)};
  o.checkpoint_every = c.checkpoint_every;
  o.warmup_steps = c.warmup_steps;
  o.max_skipped_steps = c.max_skipped_steps;
  o.resumed_from = resume_file;
  return o;
}

void describe_model(const TrainConfig& c, std::ostream& out) {
  const ModelSpec spec = model_spec(c);
  out << "model " << (spec.name.empty() ? spec.source : spec.name + " (" + spec.source + ")") << "\n";
  auto model = build_model<float>(with_recompute(spec, c.recompute), c.seed);
  BuildOptions planned;  // what the run's build fuses (none with 16-bit storage)
  planned.numerics.storage = c.precision;
  out << model.describe(planned);
}

std::string kokkos_threads(const TrainConfig& c, const std::vector<char*>& kokkos_args) {
  const bool given = has_kokkos_threads_option(kokkos_args);
  STRATA_REQUIRE(c.threads == 0 || !given, config,
                 "--threads and --kokkos-threads (--kokkos-num-threads) both set the threads; "
                 "give one (--threads counts per rank)");
  return given ? "" : kokkos_threads_option(c.ranks * threads_per_rank(c));
}

}  // namespace strata::app
