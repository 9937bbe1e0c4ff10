#include "backends/comm/registry.hpp"

#include "backends/error.hpp"
#include "strata_config.hpp"

namespace strata::comm {

std::vector<CommInfo> communicators() {
  const std::string no_mpi = mpi_backend().compiled ? "" : "this build has no MPI";
  return {
      {"self", "one rank, no communication", ""},
      {"threads", "ranks as threads of one process (--ranks N)", ""},
      {"mpi", "one rank per process (mpirun, srun)", no_mpi},
      {"hierarchical", "thread ranks inside MPI processes", no_mpi},
      {"nccl", "GPUs, device buffers (library Strata::nccl)",
       "Strata's programs do not run on NCCL yet (the library's Strata::nccl does)"},
  };
}

std::string compiled_communicators() {
  std::string s;
  for (const auto& c : communicators())
    if (c.unavailable.empty()) s += (s.empty() ? "" : ", ") + c.name;
  return s;
}

std::string resolve_communicator(const std::string& requested, int thread_ranks, int processes) {
  bool known = requested == "auto";
  std::string unavailable;
  for (const auto& c : communicators())
    if (c.name == requested) known = true, unavailable = c.unavailable;
  STRATA_REQUIRE(known, config, "--comm: unknown communicator '", requested,
                 "' (expected auto, self, threads, mpi, hierarchical or nccl)");
  STRATA_REQUIRE(unavailable.empty(), config, "--comm ", requested, ": ", unavailable,
                 " (available: ", compiled_communicators(), ")");
  const std::string chosen = requested != "auto" ? requested
                             : processes > 1 && thread_ranks > 1 ? "hierarchical"
                             : processes > 1                     ? "mpi"
                             : thread_ranks > 1                  ? "threads"
                                                                 : "self";
  const std::string ranks = std::to_string(thread_ranks) + " thread rank(s) in each of " +
                            std::to_string(processes) + " process(es)";
  if (chosen == "self")
    STRATA_REQUIRE(thread_ranks == 1 && processes == 1, config,
                   "--comm self runs one rank, not ", ranks);
  if (chosen == "threads")
    STRATA_REQUIRE(processes == 1, config, "--comm threads joins the ranks of one process, not ",
                   ranks, " (use --comm hierarchical, or start one process)");
  if (chosen == "mpi")
    STRATA_REQUIRE(thread_ranks == 1 && mpi_backend().launched(), config,
                   "--comm mpi runs one rank per process started by mpirun or srun, not ", ranks,
                   mpi_backend().launched() ? " (use --comm hierarchical for thread ranks)"
                                            : " (this process was not started by mpirun or srun)");
  if (chosen == "hierarchical")
    STRATA_REQUIRE(thread_ranks > 1 && processes > 1, config,
                   "--comm hierarchical needs thread ranks (--ranks > 1) in several MPI processes, "
                   "not ", ranks);
  return chosen;
}

}  // namespace strata::comm
