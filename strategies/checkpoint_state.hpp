// What a training checkpoint holds besides the container (strategies/checkpoint.hpp):
// the position of the run, and the model's state keyed by name.
//
// The "state" section (JSON) of a checkpoint written by this code, format 2:
//   step, epoch, index        where the next step starts
//   optimizer_steps           the optimizer's step counter
//   parameters                [[name, [shape...]], ...] in the order of the
//                             params/opt0/opt1 arrays (single-rank layout)
//   buffers                   {name: [values...]}: Dropout counters, running statistics
//   loss_scaler               {scale, good_steps, skipped} (dynamic loss scaling)
// A checkpoint is read by name: a model whose parameters were reordered
// still loads, and one that lacks or renamed a tensor is refused with an
// error naming it. Format 1 (Strata 0.1, before named parameters: no
// "parameters", Dropout counters in "dropout_calls") is read by position for
// the MLP of --layers that wrote it and refused for any other model.
#pragma once

#include "layers/layer.hpp"
#include "layers/loss_scaler.hpp"
#include "strategies/checkpoint.hpp"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace strata {

// Position of a run.
struct Position {
  std::size_t step = 0, epoch = 0, index = 0;  // index: next micro-batch in the epoch
};

// The model's state in single-rank layout, whatever the strategy (so any
// strategy resumes any).
struct Snapshot {
  std::vector<float> params, opt0, opt1;
  std::int64_t optimizer_steps = 0;
  std::map<std::string, std::vector<double>> buffers;
  std::optional<DynamicLossScaler::State> scaler;  // fp16: dynamic loss scaling
};

// The model a checkpoint is for: its parameter tensors (Sequential::parameters
// of the single-rank model) and buffers.
struct ModelTable {
  std::vector<ParamInfo> params;
  std::vector<BufferInfo> buffers;
  bool mlp = false;  // the MLP of --layers (format 1 checkpoints are its)
  // Tied weights: (the tying layer's weight name, the weight it uses)
  // (Sequential::tied_weights).
  std::vector<std::pair<std::string, std::string>> ties;
};

// The checkpoint sections for `config` (JSON compared on resume), a position
// and a snapshot (its arrays are not copied: a sharded checkpoint's manifest
// holds none; callers move them in).
checkpoint::State checkpoint_state(const std::string& config, const Position& p,
                                   const Snapshot& snap, const ModelTable& model);

// Reads a checkpoint for this model and configuration: every key of `config`
// must match, every tensor and buffer of `model` must be there with its
// size. Throws config errors naming the file and what differs, data errors
// for a damaged file.
std::pair<Snapshot, Position> read_checkpoint(const std::string& file, const std::string& config,
                                              const ModelTable& model);

}  // namespace strata
