// The machine profile `--strategy plan` plans on: --plan-profile when given,
// else this host's calibration, cached under the Strata cache folder
// ($STRATA_CACHE, else $XDG_CACHE_HOME/strata, else ~/.cache/strata, in
// profiles/) and made on first use (strata-plan calibrate's measurements, a
// few seconds). A cached profile made by another build of strata-train or
// with another thread count (stale), or that does not read as a profile
// (corrupt), is calibrated again and replaced, never trusted. In one
// process (thread ranks) the request's model is measured too, as
// `strata-plan calibrate --model` does: its layers as the layouts of its
// ranks run them and its optimizer's update (tens of seconds), kept in the
// same cached profile, which gathers the layers of every model planned (a
// layer met before is not timed again). Across MPI processes rank 0's
// profile is every process's (broadcast), so that every process plans the
// same layout; its layers are not measured there (the other processes
// would wait on the cores it times them on).
#pragma once

#include "backends/comm/communicator.hpp"
#include "planner/cost_model.hpp"
#include "planner/profile.hpp"

#include <functional>
#include <string>

namespace strata::app {

// log: progress lines (rank 0's). Collective over `world`.
planner::MachineProfile plan_profile(const std::string& given, comm::Communicator& world,
                                     const planner::PlanRequest& request,
                                     const std::function<void(const std::string&)>& log);

// Where this host's cached profile lives, for `threads` Kokkos host threads.
std::string cached_profile_path(int threads);

}  // namespace strata::app
