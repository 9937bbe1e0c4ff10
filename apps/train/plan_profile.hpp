// The machine profile `--strategy plan` plans on: --plan-profile when given,
// else this host's calibration, cached under the Strata cache folder
// ($STRATA_CACHE, else $XDG_CACHE_HOME/strata, else ~/.cache/strata, in
// profiles/) and made on first use (strata-plan calibrate's measurements, a
// few seconds). A cached profile made by another build of strata-train or
// with another thread count (stale), or that does not read as a profile
// (corrupt), is calibrated again and replaced, never trusted. Across MPI
// processes rank 0's profile is every process's (broadcast), so that every
// process plans the same layout.
#pragma once

#include "backends/comm/communicator.hpp"
#include "planner/profile.hpp"

#include <functional>
#include <string>

namespace strata::app {

// log: progress lines (rank 0's). Collective over `world`.
planner::MachineProfile plan_profile(const std::string& given, comm::Communicator& world,
                                     const std::function<void(const std::string&)>& log);

// Where this host's cached profile lives, for `threads` Kokkos host threads.
std::string cached_profile_path(int threads);

}  // namespace strata::app
