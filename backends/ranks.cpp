#include "backends/ranks.hpp"

#include "backends/error.hpp"

#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#ifdef KOKKOS_ENABLE_OPENMP
#include <omp.h>
#endif

namespace strata {

int kokkos_host_threads() { return HostExecSpace().concurrency(); }

std::string kokkos_threads_option(int threads) {
#if KOKKOS_VERSION >= 30700
  return "--kokkos-num-threads=" + std::to_string(threads);
#else
  return "--kokkos-threads=" + std::to_string(threads);
#endif
}

namespace {
GemmBackend default_gemm() {
  return Blas::vendor_available() ? GemmBackend::vendor : GemmBackend::portable;
}
}  // namespace

void run_ranks(int ranks, int threads_per_rank,
               const std::function<void(Context&, comm::Communicator&)>& body,
               const comm::CommOptions& options) {
  RankTeam(ranks, threads_per_rank, options).run(body);
}

RankTeam::RankTeam(int ranks, int threads_per_rank, const comm::CommOptions& options)
    : threads_per_rank_(threads_per_rank), team_(ranks, options), contexts_(ranks) {
  STRATA_REQUIRE(threads_per_rank >= 1, config, "thread ranks: need at least 1 thread per rank");
  const int pool = kokkos_host_threads();
  if (ranks == 1 && threads_per_rank >= pool) return;  // one rank with all of Kokkos' threads
#if defined(KOKKOS_ENABLE_OPENMP) && KOKKOS_VERSION < 40000
  if (std::is_same<ExecSpace, Kokkos::OpenMP>::value) {
    STRATA_REQUIRE(pool >= ranks * threads_per_rank, config, "thread ranks: ", ranks,
                   " ranks x ", threads_per_rank, " threads need ", ranks * threads_per_rank,
                   " Kokkos OpenMP threads, but Kokkos runs ", pool, " (start it with ",
                   kokkos_threads_option(ranks * threads_per_rank), ")");
    return;
  }
#endif
#if KOKKOS_VERSION >= 40000
  // One instance per rank, each launched from its own thread.
  std::vector<int> weights(ranks, 1);
  for (auto& e : Kokkos::Experimental::partition_space(ExecSpace(), weights)) instances_.push_back(e);
#else
  STRATA_THROW(config, thread_ranks_unavailable());
#endif
}

RankTeam::~RankTeam() = default;

void RankTeam::run(const std::function<void(Context&, comm::Communicator&)>& body) {
  const int ranks = size();
  // The rank's Context, made on its thread at its first run.
  auto context = [&](int r, ExecSpace exec) -> Context& {
    if (!contexts_[r]) contexts_[r] = std::make_unique<Context>(default_gemm(), exec);
    return *contexts_[r];
  };
  if (ranks == 1 && threads_per_rank_ >= kokkos_host_threads()) {
    team_.run([&](int r) { body(context(r, ExecSpace()), team_.comm(r)); });
    return;
  }
#if defined(KOKKOS_ENABLE_OPENMP) && KOKKOS_VERSION < 40000
  if (std::is_same<ExecSpace, Kokkos::OpenMP>::value) {
    // Each rank is the master of its own partition of the OpenMP pool.
    const int levels = omp_get_max_active_levels();
    omp_set_max_active_levels(2);
    const int per_rank = threads_per_rank_;
    comm::Spawner spawner = [per_rank](int n, const std::function<void(int)>& rank_body) {
      Kokkos::OpenMP::partition_master([&](int id, int) { rank_body(id); }, n, per_rank);
    };
    try {
      team_.run([&](int r) { body(context(r, ExecSpace()), team_.comm(r)); }, spawner);
    } catch (...) {
      omp_set_max_active_levels(levels);
      throw;
    }
    omp_set_max_active_levels(levels);
    return;
  }
#endif
#if KOKKOS_VERSION >= 40000
  team_.run([&](int r) {
#ifdef KOKKOS_ENABLE_OPENMP
    // A BLAS built with OpenMP takes the calling thread's OpenMP thread
    // count, which a new std::thread has at its default (every core): one
    // thread, as inside Kokkos 3.x's partitions. Several threads' concurrent
    // multi-threaded calls into OpenBLAS's OpenMP build can spin forever, and
    // the GEMMs would not be the single rank's.
    omp_set_num_threads(1);
#endif
    body(context(r, instances_[r]), team_.comm(r));
  });
#else
  (void)body;
  STRATA_THROW(config, thread_ranks_unavailable());
#endif
}

std::string thread_ranks_unavailable() {
#if KOKKOS_VERSION >= 40000
  return "";
#else
#if defined(KOKKOS_ENABLE_OPENMP)
  if (std::is_same<ExecSpace, Kokkos::OpenMP>::value) return "";
#endif
  return std::string("thread ranks need Kokkos with OpenMP (3.x) or Kokkos 4 and newer; this "
                     "build's default execution space is ") + ExecSpace::name() +
         " with Kokkos " + std::to_string(KOKKOS_VERSION) + " (use MPI ranks instead)";
#endif
}

}  // namespace strata
