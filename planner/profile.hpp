// A machine profile: what the planner (planner/cost_model.hpp) knows of the
// machine a model will train on. Written by `strata-plan calibrate` for the
// machine it runs on, or by hand for a cluster one cannot run on
// (planner/profiles/: a DGX-A100 and an H100 cluster, each figure with its
// source). JSON, every figure in SI units:
//
//   {
//     "format": "strata-machine-profile", "version": 1,
//     "name": "...", "source": "how the figures were obtained",
//     "kind": "cpu" | "gpu",
//     "nodes": 2,                 // nodes there are
//     "devices_per_node": 8,      // GPUs, or cores of a CPU node
//     "memory_per_node": 6.4e11,  // bytes (a GPU node: the sum of its devices')
//     "gemm_flops": {"fp32": 1.95e13, "bf16": 2.3e14},  // large-GEMM rate of one device (core)
//     "gemm_half_flops": 2e9,     // a GEMM of this many FLOP reaches half that rate
//     "memory_bandwidth": 2.0e12, // bytes/s of one device (CPU: of the whole node)
//     "launch": 5e-6,             // seconds per kernel (a layer's pass)
//     "intra_node": {"latency": 3e-6, "bandwidth": 2.4e11},  // alpha-beta, per rank (latency >= 0)
//     "inter_node": {"latency": 6e-6, "bandwidth": 2.4e10},
//     "reduce_scatter_allgather": {"latency": 2e-6, "bandwidth": 1.3e10},  // optional
//     "measured_layers": [        // optional: `strata-plan calibrate --model`
//       {"layer": "Linear(784, 1024) in {784} tp 1", "samples": 128, "threads": 1,
//        "ranks": 2, "forward": 1.1e-3, "backward": 2.3e-3}, ...],
//     "measured_updates": [       // optional: the same, the optimizer's update
//       {"optimizer": "sgd", "threads": 1, "ranks": 2, "bandwidth": 4.1e10}, ...],
//     "measured_steps": [         // optional: the same, whole training steps
//       {"model": "5 layers, 1863690 parameters, cross-entropy, fp32, fnv 8c1d...",
//        "batch": 256,
//        "optimizer": "sgd", "threads": 1, "ranks": 2, "step": 1.6e-2}, ...]
//   }
//
// reduce_scatter_allgather: a reduce-scatter followed by an allgather (the
// sums of ZeRO-1) between the ranks of a node, as the alpha-beta fit of an
// allreduce's time (`strata-plan calibrate` measures it; without it ZeRO-1
// is charged one allreduce on the node's link).
// measured_layers are a model's layers timed on this machine, each alone on
// a micro-batch of `samples` samples: its forward, and its backward (the
// input and weight gradients), with `threads` threads per rank while
// `ranks` ranks run the same at once, as the ranks of a layout do (a
// tensor-parallel shard with its group's sums inside). "layer" is the key
// planner::layer_key gives it. The cost model takes them over its
// rate-curve terms where layer, samples and threads match.
// measured_updates are a model's optimizer updating all its parameters on
// `ranks` ranks at once (at that model's size; another model of the same
// optimizer takes its rate): the bytes it reads and writes (weight, gradient and
// state) per second of one rank, which replaces memory bandwidth in the
// optimizer's term (an update that fits in the caches runs faster).
// measured_steps are whole training steps of a model (planner::model_key)
// and global batch, as strata-train runs them with plain data parallelism
// over `ranks` thread ranks of `threads` threads (one rank: local training):
// the mean seconds per step after the warm-up (strata-train's samples/s;
// the batches' loading is not in it). What such a step spends beyond the
// cost model's prediction of that layout (the loss, the small allreduces of
// the loss and the checks, the ranks' waits for one another) is added to
// every layout of that many ranks.
//
// A rank of a GPU profile drives one device; ranks of a CPU profile share a
// node's cores (threads = cores / ranks on the node) and its memory
// bandwidth.
#pragma once

#include "backends/precision.hpp"
#include "layers/optimizer.hpp"

#include <cstddef>
#include <string>
#include <vector>

namespace strata::planner {

// A link's alpha-beta model: a message of b bytes takes latency + b / bandwidth.
struct Link {
  double latency = 0;    // seconds
  double bandwidth = 0;  // bytes per second
  double time(double bytes) const { return latency + bytes / bandwidth; }
};

struct MeasuredLayer {
  std::string layer;  // planner::layer_key
  std::size_t samples = 0;
  int threads = 1, ranks = 1;
  double forward = 0, backward = 0;  // seconds
};

struct MeasuredUpdate {
  OptimizerKind optimizer = OptimizerKind::sgd;
  int threads = 1, ranks = 1;
  double bandwidth = 0;  // bytes per second of one rank
};

struct MeasuredStep {
  std::string model;  // planner::model_key
  std::size_t batch = 0;
  OptimizerKind optimizer = OptimizerKind::sgd;
  int threads = 1, ranks = 1;
  double step = 0;  // seconds
};

struct MachineProfile {
  std::string name, source;
  bool gpu = false;
  int nodes = 1;
  int devices_per_node = 1;
  double memory_per_node = 0;   // bytes
  double gemm_flops_fp32 = 0;   // FLOP/s of one device (core) on large GEMMs
  double gemm_flops_16 = 0;     // the same with 16-bit inputs (bf16, fp16)
  double gemm_half_flops = 0;   // GEMM size (FLOP) at half the large rate
  double memory_bandwidth = 0;  // bytes/s: one device (GPU) or the node (CPU)
  double launch = 0;            // seconds per kernel launch
  Link intra_node, inter_node;
  Link reduce_scatter_allgather;  // inside a node; bandwidth 0: not measured
  std::vector<MeasuredLayer> measured_layers;
  std::vector<MeasuredUpdate> measured_updates;
  std::vector<MeasuredStep> measured_steps;

  // The large-GEMM rate of one device at a precision.
  double gemm_flops(Precision p) const { return p == Precision::fp32 ? gemm_flops_fp32 : gemm_flops_16; }
  // The measurement of a layer on micro-batches of `samples` on ranks of
  // `threads` threads (the one with the most ranks running at once, up to
  // `ranks`), or null.
  const MeasuredLayer* measured(const std::string& layer, std::size_t samples, int threads,
                                int ranks) const;
  // The measured update bandwidth of an optimizer on ranks of `threads`
  // threads (the one with the most ranks at once, up to `ranks`), or 0.
  double update_bandwidth(OptimizerKind optimizer, int threads, int ranks) const;
  // The measured step of a model on `ranks` ranks of `threads` threads, or null.
  const MeasuredStep* measured_step(const std::string& model, std::size_t batch,
                                    OptimizerKind optimizer, int threads, int ranks) const;
};

// Reads a profile; throws config naming the file and the field that is
// missing, of the wrong type, or not positive.
MachineProfile load_profile(const std::string& path);
// The same from the file's text (`path` names it in errors).
MachineProfile parse_profile(const std::string& text, const std::string& path);
// The profile as JSON text (the format above); save_profile writes it.
std::string profile_json(const MachineProfile& p);
void save_profile(const MachineProfile& p, const std::string& path);

}  // namespace strata::planner
