// Fault injection for strata-train's tests of failure handling: the
// environment variables the tests set, read here (the library reads none for
// faults) and installed through the library's seams: a training hook
// (TrainerHooks::after_step) and the checkpoint writer's WriteFaults.
#pragma once

#include "backends/error.hpp"
#include "strategies/checkpoint.hpp"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace strata::app {

// Fault injection for tests of failure handling: STRATA_FAULT=RANK:STEP makes
// global rank RANK fail after STEP steps: a thread rank throws; with MPI (one
// rank per process) the process kills itself with SIGKILL, as a lost node would.
// STRATA_FAULT=RANK:STEP:stop (MPI): the process stops itself (SIGSTOP), alive
// but silent, as a node cut off by a dead link looks to the others.
struct Fault {
  int rank = -1;
  std::size_t step = 0;
  bool kill_process = false;
  bool stop = false;
  static Fault from_environment(bool kill_process) {
    Fault f;
    f.kill_process = kill_process;
    if (const char* e = std::getenv("STRATA_FAULT")) {
      const char* colon = std::strchr(e, ':');
      STRATA_REQUIRE(colon != nullptr, config, "STRATA_FAULT='", e, "': expected RANK:STEP");
      f.rank = std::atoi(e);
      f.step = static_cast<std::size_t>(std::atoll(colon + 1));
      const char* mode = std::strchr(colon + 1, ':');
      STRATA_REQUIRE(mode == nullptr || std::strcmp(mode, ":stop") == 0, config, "STRATA_FAULT='",
                     e, "': expected RANK:STEP or RANK:STEP:stop");
      f.stop = mode != nullptr;
    }
    return f;
  }
  void maybe_fail(int rank_now, std::size_t step_now) const {
    if (rank_now != rank || step_now != step) return;
    if (kill_process && stop) {
      std::fprintf(stderr, "strata-train: STRATA_FAULT: stopping rank %d at step %zu\n", rank, step);
      std::fflush(stderr);
      ::raise(SIGSTOP);
      std::_Exit(4);  // continued (by the launcher ending the job): gone, as the node is
    }
    if (kill_process) {
      std::fprintf(stderr, "strata-train: STRATA_FAULT: killing rank %d at step %zu\n", rank, step);
      std::fflush(stderr);
      ::raise(SIGKILL);
    }
    STRATA_THROW(runtime, "STRATA_FAULT: injected failure of rank ", rank, " at step ", step);
  }
};

// STRATA_FAIL_CHECKPOINT_WRITE=N: the N-th checkpoint file write of this
// process fails with ENOSPC; STRATA_CHECKPOINT_WRITE_DELAY_MS=M: a pause of M
// ms in the middle of writing each checkpoint file. Unset or empty: off.
// Throws config for a value that is no whole number (below 2^31).
inline void install_checkpoint_faults_from_environment() {
  auto whole = [](const char* name, const char* e) -> long {
    if (e == nullptr || *e == '\0') return 0;
    char* end = nullptr;
    const long v = std::strtol(e, &end, 10);
    STRATA_REQUIRE(*end == '\0' && v >= 0 && v <= 2147483647L, config, name, "='", e,
                   "': expected a whole number (below 2^31)");
    return v;
  };
  checkpoint::WriteFaults f;
  f.fail_nth = static_cast<int>(
      whole("STRATA_FAIL_CHECKPOINT_WRITE", std::getenv("STRATA_FAIL_CHECKPOINT_WRITE")));
  f.pause_ms = whole("STRATA_CHECKPOINT_WRITE_DELAY_MS", std::getenv("STRATA_CHECKPOINT_WRITE_DELAY_MS"));
  if (f.fail_nth > 0 || f.pause_ms > 0) checkpoint::install_write_faults(f);
}

}  // namespace strata::app
