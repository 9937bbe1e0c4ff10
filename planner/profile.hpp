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
//     "intra_node": {"latency": 3e-6, "bandwidth": 2.4e11},  // alpha-beta, per rank
//     "inter_node": {"latency": 6e-6, "bandwidth": 2.4e10}
//   }
//
// A rank of a GPU profile drives one device; ranks of a CPU profile share a
// node's cores (threads = cores / ranks on the node) and its memory
// bandwidth.
#pragma once

#include "backends/precision.hpp"

#include <string>

namespace strata::planner {

// A link's alpha-beta model: a message of b bytes takes latency + b / bandwidth.
struct Link {
  double latency = 0;    // seconds
  double bandwidth = 0;  // bytes per second
  double time(double bytes) const { return latency + bytes / bandwidth; }
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

  // The large-GEMM rate of one device at a precision.
  double gemm_flops(Precision p) const { return p == Precision::fp32 ? gemm_flops_fp32 : gemm_flops_16; }
};

// Reads a profile; throws config naming the file and the field that is
// missing, of the wrong type, or not positive.
MachineProfile load_profile(const std::string& path);
// The profile as JSON text (the format above); save_profile writes it.
std::string profile_json(const MachineProfile& p);
void save_profile(const MachineProfile& p, const std::string& path);

}  // namespace strata::planner
