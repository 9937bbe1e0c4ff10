// `strata-plan calibrate`: measures the machine it runs on and returns its
// profile (planner/profile.hpp), in about a minute:
//   - the GEMM rate: the vendor GEMM (Strata's default) on shapes of a
//     layer (rows 32-512 x widths 128-2048) with every thread; a fit of
//     t = (f + f_half) / R (each point's relative error weighted by its
//     time) gives R per core and f_half (FLOP);
//   - memory bandwidth: a scaled copy of 256 MiB with every thread;
//   - the launch cost: an empty kernel, many times;
//   - the link: allreduces of 4 KiB to 64 MiB between two thread ranks, a
//     fit of t = 2 latency + bytes / bandwidth (the ring of two). Both links
//     of the profile get it (ranks of one node); a multi-node CPU cluster's
//     inter-node link is written by hand;
//   - cores (Kokkos host threads) and the node's memory (/proc/meminfo);
//   - with a model (measure_gemms): its Linear GEMMs, as its layouts run them.
// Each figure is the median of repetitions; progress goes to `log`.
#pragma once

#include "planner/cost_model.hpp"
#include "planner/profile.hpp"

#include <functional>
#include <string>

namespace strata::planner {

struct CalibrationFit {
  double rate = 0, offset = 0;  // t = (x + offset) / rate
};
// The least-squares fit of t = (x + offset) / rate to points (x, t),
// weighted by 1 / t; throws config for fewer than two distinct x.
CalibrationFit fit_rate(const std::vector<double>& x, const std::vector<double>& t);

MachineProfile calibrate(const std::function<void(const std::string&)>& log);

// This node's memory in bytes (/proc/meminfo's MemTotal); throws runtime
// when it cannot be read.
double node_memory();

// Times a model's Linear GEMMs (planner::gemm_shapes of its layouts) on
// `ranks` thread ranks at once, each with the cores divided among them, as
// a layout of that many ranks runs them: the forward GEMM and the two of
// backward (input and weight gradients), each the median of repetitions.
// Appends them to p.measured_gemms.
void measure_gemms(MachineProfile& p, const std::vector<GemmShape>& shapes, int ranks,
                   const std::function<void(const std::string&)>& log);

}  // namespace strata::planner
