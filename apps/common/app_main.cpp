#include "apps/common/app_main.hpp"

#include "backends/ranks.hpp"
#include "backends/runtime.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace strata::app {

namespace {
// N of --kokkos-threads=N or --kokkos-num-threads=N (digits only), else null.
const char* threads_value(const char* arg) {
  for (const char* prefix : {"--kokkos-threads=", "--kokkos-num-threads="}) {
    const std::size_t n = std::strlen(prefix);
    if (std::strncmp(arg, prefix, n) != 0) continue;
    const char* v = arg + n;
    if (*v == '\0' || std::strspn(v, "0123456789") != std::strlen(v) || std::strlen(v) > 6)
      return nullptr;
    return v;
  }
  return nullptr;
}
}  // namespace

void report_error(const char* program, const char* kind, const std::string& message) {
  std::string text = std::string(program) + ": " + kind;
  if (launched_by_mpi()) {
    // The launcher's variables: Open MPI, MPICH/PMI, PMIx, Slurm.
    for (const auto& [rank, size] : {std::pair{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                     std::pair{"PMI_RANK", "PMI_SIZE"},
                                     std::pair{"PMIX_RANK", "PMIX_SIZE"},
                                     std::pair{"SLURM_PROCID", "SLURM_NTASKS"}}) {
      const char* r = std::getenv(rank);
      const char* n = std::getenv(size);
      if (r == nullptr) continue;
      text += std::string(" [rank ") + r + (n ? std::string(" of ") + n : std::string()) + "]";
      break;
    }
  }
  text += ": " + message + "\n";
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

SplitArgs split_kokkos_args(int argc, char** argv) {
  SplitArgs s;
  s.kokkos.push_back(argv[0]);
  for (int i = 1; i < argc; ++i) {
    if (const char* n = threads_value(argv[i])) {
      s.owned.push_back(kokkos_threads_option(std::atoi(n)));
      s.kokkos.push_back(s.owned.back().data());
    } else if (std::strncmp(argv[i], "--kokkos-", 9) == 0) {
      s.kokkos.push_back(argv[i]);
    }
    else
      s.program.emplace_back(argv[i]);
  }
  s.kokkos.push_back(nullptr);
  return s;
}

std::unique_ptr<Runtime> start_runtime(SplitArgs& args, int threads) {
  if (threads > 0) {  // kept in args.owned: Kokkos' argv points into it
    args.owned.push_back(kokkos_threads_option(threads));
    args.kokkos.insert(args.kokkos.end() - 1, args.owned.back().data());  // before the nullptr
  }
  int argc = static_cast<int>(args.kokkos.size()) - 1;
  return std::make_unique<Runtime>(argc, args.kokkos.data());
}

}  // namespace strata::app
