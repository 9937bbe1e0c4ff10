#include "backends/environment.hpp"

#include <cstdlib>
#include <sstream>

namespace strata {

const std::vector<EnvironmentVariable>& environment_variables() {
  static const std::vector<EnvironmentVariable> table{
      {"STRATA_COMM_TIMEOUT", "seconds (default 300)",
       "how long a collective may wait before the run ends with an error naming it"},
      {"STRATA_COMM_CHECK", "1 (default off)",
       "MPI ranks check that they all call the same collective (a descriptor exchange first)"},
      {"STRATA_MPI_SHM", "0 (default on)",
       "0: no shared-memory window for the gradient sums of MPI ranks on one node"},
      {"STRATA_MPI_CUDA_AWARE", "1 (default: what Open MPI reports)",
       "take MPI as CUDA-aware (device buffers passed to MPI directly)"},
      {"STRATA_INLINE_KERNELS", "0 (default on)",
       "0: every host kernel through Kokkos, as on a GPU (small ones otherwise run inline)"},
      {"STRATA_DEVICE_CHECK", "1 (default off)",
       "host builds: every allocation counts as device memory and host reads of it fail"},
      {"STRATA_CONV_ALGORITHM", "auto | chunks | samples (default auto)",
       "how a host Conv2d runs (for benchmarks and checks)"},
      {"STRATA_FASHION_MNIST_DIR", "folder (default /usr/share/datasets/fashion-mnist)",
       "where --dataset fashion-mnist is read"},
      {"STRATA_FORTUNES_DIR", "folder (default /usr/share/games/fortunes)",
       "where --dataset fortunes is read"},
      {"STRATA_MODELS_DIR", "folder (default: the installed share/strata/models)",
       "strata-bench-train: where the model files of the workloads are found"},
      {"STRATA_CACHE", "folder (default $XDG_CACHE_HOME/strata or ~/.cache/strata)",
       "strata-train --strategy plan: where this machine's calibrated profile is cached"},
      {"STRATA_FAULT", "RANK:STEP or RANK:STEP:stop (tests)",
       "strata-train: rank RANK fails at step STEP (a thread rank throws, an MPI process is killed; "
       "stop: it stops itself, alive but silent)"},
      {"STRATA_FAIL_CHECKPOINT_WRITE", "N (tests)",
       "strata-train: the N-th checkpoint file write fails with ENOSPC"},
      {"STRATA_CHECKPOINT_WRITE_DELAY_MS", "milliseconds (tests)",
       "strata-train: a pause in the middle of writing each checkpoint file (to kill a run there)"},
  };
  return table;
}

std::string environment_report() {
  std::ostringstream os;
  os << "environment variables (docs/development.md):\n";
  for (const EnvironmentVariable& v : environment_variables()) {
    const char* value = std::getenv(v.name);
    os << "  " << v.name << (value != nullptr ? std::string("=") + value : std::string(" (unset)"))
       << ": " << v.meaning << " [" << v.values << "]\n";
  }
  return os.str();
}

}  // namespace strata
