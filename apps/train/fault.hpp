// Fault injection for strata-train's tests of failure handling.
#pragma once

#include "backends/error.hpp"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace strata::app {

// Fault injection for tests of failure handling: STRATA_FAULT=RANK:STEP makes
// global rank RANK fail after STEP steps: a thread rank throws; with MPI (one
// rank per process) the process kills itself with SIGKILL, as a lost node would.
struct Fault {
  int rank = -1;
  std::size_t step = 0;
  bool kill_process = false;
  static Fault from_environment(bool kill_process) {
    Fault f;
    f.kill_process = kill_process;
    if (const char* e = std::getenv("STRATA_FAULT")) {
      const char* colon = std::strchr(e, ':');
      STRATA_REQUIRE(colon != nullptr, config, "STRATA_FAULT='", e, "': expected RANK:STEP");
      f.rank = std::atoi(e);
      f.step = static_cast<std::size_t>(std::atoll(colon + 1));
    }
    return f;
  }
  void maybe_fail(int rank_now, std::size_t step_now) const {
    if (rank_now != rank || step_now != step) return;
    if (kill_process) {
      std::fprintf(stderr, "strata-train: STRATA_FAULT: killing rank %d at step %zu\n", rank, step);
      std::fflush(stderr);
      ::raise(SIGKILL);
    }
    STRATA_THROW(runtime, "STRATA_FAULT: injected failure of rank ", rank, " at step ", step);
  }
};

}  // namespace strata::app
