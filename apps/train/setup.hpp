// How strata-train's options become a run: the threads of each rank, the
// data, the strategy's options and what a checkpoint must match. The
// training loop (main.cpp) calls these once, before the first step.
#pragma once

#include "planner/cost_model.hpp"
#include "planner/profile.hpp"

#include "apps/train/train_config.hpp"
#include "backends/comm/communicator.hpp"
#include "backends/context.hpp"
#include "data/dataset.hpp"
#include "layers/sequential.hpp"
#include "strategies/engine.hpp"
#include "training/trainer.hpp"

#include <ostream>
#include <string>
#include <vector>

namespace strata::app {

// Processes of this job on this node, from the launcher's environment.
int local_processes();
// --threads, or the node's cores shared by its processes and thread ranks.
int threads_per_rank(const TrainConfig& c);
// Kokkos host threads per thread rank (after Kokkos started).
int ctx_threads_per_rank(const TrainConfig& c);
// Whether Kokkos' own options set the threads.
bool has_kokkos_threads_option(const std::vector<char*>& kokkos_args);
// A note on stderr when waiting OpenMP threads would spin on a busy machine.
void wait_policy_hint(const TrainConfig& c, const comm::Communicator& world);

// The training and test sets, normalised, checked against the model's input
// and output (`model`: the single-rank model, not built). normalizer (when
// given): the normalisation applied (empty vectors: none).
data::Split load_data(const TrainConfig& c, const Sequential<float>& model,
                      data::Normalizer* normalizer = nullptr);

GemmBackend gemm_backend(const TrainConfig& c);
// What the strategy gets: the model, the optimizer and the parallel layout
// on `world` ranks.
EngineOptions engine_options(const TrainConfig& c, const ModelSpec& model, int world);

// What the planner is asked for a run of these options on `ranks` ranks.
planner::PlanRequest plan_request(const TrainConfig& c, const ModelSpec& model, int ranks);

// --strategy plan: c with the layout strata-plan ranks first for this model,
// batch and `world` ranks on `profile` (apps/train/plan_profile.hpp; plain
// data parallelism as --dp N, the rest as --strategy hybrid with --dp, --pp,
// --tp, --micro-batches, --schedule, --zero; --recompute either way);
// *summary says which and why. Throws config when no
// layout fits, naming the closest.
TrainConfig planned_config(const TrainConfig& c, const ModelSpec& model,
                           const planner::MachineProfile& profile, int world, std::string* summary);
// Notes on options that change nothing for this model and optimizer
// (--recompute without blocks, --no-decay-bias-norm without weight decay).
std::vector<std::string> option_notes(const TrainConfig& c, const ModelSpec& model);
// The JSON a checkpoint must match to be resumed by this configuration.
std::string checkpoint_config(const TrainConfig& c);

// --trace PATH, or PATH with -rankN before .json for each MPI process.
std::string trace_path(const std::string& path, const comm::Communicator& world);

// The cross-option rules that depend on the ranks started (`processes`
// processes of c.ranks thread ranks each); throws config naming the options.
// The rules among the options alone are parse_train_args's
// (train_config.hpp); the engines validate their own options again
// (validate_mesh, check_factors) for library callers.
void validate_layout(const TrainConfig& c, const ModelSpec& model, int processes);
// Fails now, not after training, on an unusable checkpoint directory or
// --export file (global rank 0 tries them).
void prepare_outputs(const TrainConfig& c, const comm::Communicator& world);
// Starts --trace and --kernel-shapes (their files tried now); finish_recording
// writes them after training.
void start_recording(const TrainConfig& c, const comm::Communicator& world);
void finish_recording(const TrainConfig& c, const comm::Communicator& world);

// Restores the checkpoint of --resume / --resume-from (*start: where it
// stopped, *resume_file: which) or imports the weights of --init-from;
// returns the import's note ("" without), its lines after the first
// starting with `prefix`.
std::string restore_or_import(const TrainConfig& c, Engine& engine, const std::string& prefix,
                              Position* start, std::string* resume_file);
// What the training loop (training/trainer.hpp) gets: batch is the global
// batch, train the training set (its zero value pads random crops).
TrainerOptions trainer_options(const TrainConfig& c, std::size_t batch, const data::Dataset& train,
                               const std::string& resume_file);

// --dry-run: the layout these options give on `ranks` ranks, and the memory
// per rank the planner's accounting predicts (planner/cost_model.hpp), as
// lines to print; nothing is allocated. Throws config when
// --memory-budget-mb is given and the layout exceeds it.
std::vector<std::string> dry_run_report(const TrainConfig& c, const ModelSpec& model, int ranks);

// --describe: the model's name and layer table (nothing allocated or trained).
void describe_model(const TrainConfig& c, std::ostream& out);
// The Kokkos option that gives it ranks x threads-per-rank host threads, or
// "" when Kokkos' own options set them; throws config when --threads does too.
std::string kokkos_threads(const TrainConfig& c, const std::vector<char*>& kokkos_args);

}  // namespace strata::app
