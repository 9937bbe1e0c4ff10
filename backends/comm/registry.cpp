#include "backends/comm/registry.hpp"

#include "backends/error.hpp"
#include "backends/kokkos.hpp"

namespace strata::comm {

namespace {
const DeviceBackend* g_device_backend = nullptr;

std::vector<CommInfo> communicators(const Platform& p) {
  const std::string no_mpi = p.mpi_compiled ? "" : "this build has no MPI";
  std::string no_nccl;
  if (p.device_comm.empty())
    no_nccl = "this program was built without NCCL (library Strata::nccl)";
  else if (!p.device_memory)
    no_nccl = "NCCL moves GPU memory, and this build's kernels run on " + p.kernels +
              " (host memory); use threads or mpi";
  return {
      {"self", "one rank, no communication", ""},
      {"threads", "ranks as threads of one process (--ranks N)", ""},
      {"mpi", "one rank per process (mpirun, srun)", no_mpi},
      {"hierarchical", "thread ranks inside MPI processes", no_mpi},
      {"nccl", "GPUs: one rank per process and device (library Strata::nccl)", no_nccl},
  };
}

std::string usable(const std::vector<CommInfo>& list) {
  std::string s;
  for (const auto& c : list)
    if (c.unavailable.empty()) s += (s.empty() ? "" : ", ") + c.name;
  return s;
}
}  // namespace

void use_device_backend(const DeviceBackend& backend) { g_device_backend = &backend; }
const DeviceBackend* device_backend() { return g_device_backend; }

Platform Platform::current() {
  Platform p;
  p.device_memory = !Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible;
  p.kernels = ExecSpace::name();
  p.mpi_compiled = mpi_backend().compiled;
  p.mpi_launched = mpi_backend().launched();
  p.device_comm = g_device_backend ? g_device_backend->name : "";
  return p;
}

std::vector<CommInfo> communicators() { return communicators(Platform::current()); }

std::string compiled_communicators() { return usable(communicators()); }

std::string resolve_communicator(const std::string& requested, int thread_ranks, int processes,
                                 const Platform& platform) {
  const auto list = communicators(platform);
  bool known = requested == "auto";
  std::string unavailable;
  for (const auto& c : list)
    if (c.name == requested) known = true, unavailable = c.unavailable;
  STRATA_REQUIRE(known, config, "--comm: unknown communicator '", requested,
                 "' (expected auto, self, threads, mpi, hierarchical or nccl)");
  STRATA_REQUIRE(unavailable.empty(), config, "--comm ", requested, ": ", unavailable,
                 " (available: ", usable(list), ")");
  const bool nccl_usable = platform.device_memory && !platform.device_comm.empty();
  const std::string chosen = requested != "auto"                        ? requested
                             : processes > 1 && thread_ranks > 1         ? "hierarchical"
                             : processes > 1 && nccl_usable              ? "nccl"
                             : processes > 1                             ? "mpi"
                             : thread_ranks > 1                          ? "threads"
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
    STRATA_REQUIRE(thread_ranks == 1 && platform.mpi_launched, config,
                   "--comm mpi runs one rank per process started by mpirun or srun, not ", ranks,
                   platform.mpi_launched ? " (use --comm hierarchical for thread ranks)"
                                         : " (this process was not started by mpirun or srun)");
  if (chosen == "hierarchical")
    STRATA_REQUIRE(thread_ranks > 1 && processes > 1, config,
                   "--comm hierarchical needs thread ranks (--ranks > 1) in several MPI processes, "
                   "not ", ranks);
  if (chosen == "nccl")
    STRATA_REQUIRE(thread_ranks == 1, config, "--comm nccl runs one rank per process and GPU, not ",
                   ranks, " (NCCL puts no two ranks of a communicator on one device: start one "
                   "process per GPU with mpirun or srun)");
  return chosen;
}

}  // namespace strata::comm
