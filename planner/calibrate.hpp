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
//   - with a model (measure_model: measure_layers, measure_update,
//     measure_step): its layers, as its layouts run them, its optimizer's
//     update, and whole training steps of plain data parallelism.
// Each figure is the median of repetitions (a step's: the mean over its
// timed steps, as strata-train reports it); progress goes to `log`.
#pragma once

#include "planner/cost_model.hpp"
#include "planner/profile.hpp"
#include "planner/search.hpp"

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

// Times a model's top-level layers as the stage sets (planner::stage_sets
// of its layouts) hold them, on `ranks` thread ranks at once, each with the
// cores divided among them, as a layout of that many ranks runs them: each
// layer alone on a micro-batch, its forward and its backward (input and
// weight gradients; none for the model's first layer's input), each the
// median of repetitions; a tensor shard with its group's sums inside. A
// layer the profile holds for these ranks, or met before, is timed once.
// Appends them to p.measured_layers.
void measure_layers(MachineProfile& p, const PlanRequest& request, const std::vector<StageSet>& sets,
                    int ranks, const std::function<void(const std::string&)>& log);

// Times the request's optimizer updating all the model's parameters on
// `ranks` thread ranks at once (median of repetitions) and appends the bytes
// per second of one rank (weight, gradient and state read, weight and state
// written) to p.measured_updates.
void measure_update(MachineProfile& p, const PlanRequest& request, int ranks,
                    const std::function<void(const std::string&)>& log);

// Times whole training steps of the request's model and batch as
// strata-train runs them with plain data parallelism over request.ranks
// thread ranks (one rank: local training), on synthetic samples: five
// warm-up steps, then about two seconds of steps (8 to 100), and appends the
// seconds per step to p.measured_steps (the cost model's other work).
// Throws config for a precision other than fp32.
void measure_step(MachineProfile& p, const PlanRequest& request,
                  const std::function<void(const std::string&)>& log);

// All for a request: its layers as every layout of its ranks (on one node,
// the cost model's ranks per node) runs them, its optimizer's update unless
// the profile has it for these ranks, and, when every rank is a thread rank
// of this node and the precision fp32, its whole step unless the profile has
// it.
void measure_model(MachineProfile& p, const PlanRequest& request,
                   const std::function<void(const std::string&)>& log);

}  // namespace strata::planner
