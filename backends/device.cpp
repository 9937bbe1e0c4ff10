// The platform-independent part of backends/device.hpp.
#include "backends/device.hpp"

#include "backends/error.hpp"

#include <cstdlib>

namespace strata::device {

int local_rank_from_environment() {
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK",
                        "SLURM_LOCALID", "PMI_LOCAL_RANK", "PMIX_LOCAL_RANK"}) {
    const char* s = std::getenv(v);
    if (s == nullptr || *s == '\0') continue;
    char* end = nullptr;
    const long r = std::strtol(s, &end, 10);
    if (*end == '\0' && r >= 0) return static_cast<int>(r);
  }
  return -1;
}

int choose(int requested, int local_rank, int visible) {
  STRATA_REQUIRE(visible > 0, config, "--device: no device to choose from (this build runs on ",
                 ExecSpace::name(), ")");
  if (requested >= 0) {
    STRATA_REQUIRE(requested < visible, config, "--device ", requested, ": this process sees ",
                   visible, " ", platform(), " device(s) (0 to ", visible - 1, ")");
    return requested;
  }
  return local_rank < 0 ? 0 : local_rank % visible;
}

std::string kokkos_option(int device) { return "--kokkos-device-id=" + std::to_string(device); }

}  // namespace strata::device
