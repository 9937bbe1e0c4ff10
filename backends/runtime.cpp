#include "backends/runtime.hpp"

#include "backends/blas.hpp"
#include "backends/kokkos.hpp"
#include "strata_config.hpp"
#if STRATA_HAS_MPI
#include "backends/comm/mpi.hpp"
#endif
#include "backends/comm/self.hpp"

#include <cstdlib>
#include <sstream>

namespace strata {

Runtime::Runtime(int& argc, char** argv) {
  // libgomp has already read OMP_PROC_BIND (unset means no binding) when main
  // starts; saying so explicitly only silences Kokkos 3.x's warning about it.
  setenv("OMP_PROC_BIND", "false", /*overwrite=*/0);
#if STRATA_HAS_MPI
  if (comm::mpi::launched_by_mpi()) comm::mpi::initialize(argc, argv);
#endif
  Kokkos::initialize(argc, argv);
}

Runtime::~Runtime() {
  if (Kokkos::is_initialized()) Kokkos::finalize();
#if STRATA_HAS_MPI
  comm::mpi::finalize();
#endif
}

bool launched_by_mpi() {
#if STRATA_HAS_MPI
  return comm::mpi::launched_by_mpi();
#else
  return false;
#endif
}

void Runtime::abort(int code) {
#if STRATA_HAS_MPI
  if (comm::mpi::initialized()) MPI_Abort(MPI_COMM_WORLD, code);
#endif
  std::exit(code);
}

std::unique_ptr<comm::Communicator> world_communicator() {
#if STRATA_HAS_MPI
  if (comm::mpi::initialized()) return std::make_unique<comm::MpiComm>(MPI_COMM_WORLD, false);
#endif
  return std::make_unique<comm::SelfComm>();
}

namespace {
std::string kokkos_version() {
  return std::to_string(KOKKOS_VERSION / 10000) + "." + std::to_string(KOKKOS_VERSION / 100 % 100) +
         "." + std::to_string(KOKKOS_VERSION % 100);
}
}  // namespace

std::string build_summary() {
  std::ostringstream os;
  os << "Strata " << STRATA_VERSION << ", Kokkos " << kokkos_version() << " ("
     << ExecSpace::name() << "), GEMM " << Blas::vendor_name();
  return os.str();
}

std::string build_info() {
  std::ostringstream os;
  os << "Strata " << STRATA_VERSION << "\n"
     << "Kokkos " << kokkos_version() << ": default execution space " << ExecSpace::name()
     << ", host execution space " << HostExecSpace::name() << "\n"
     << "GEMM: " << (Blas::vendor_available() ? Blas::vendor_name() : std::string("portable Kokkos kernel"))
     << " (portable Kokkos GEMM always available)\n"
     << "communicators: self, threads" << (STRATA_HAS_MPI ? ", mpi" : "") << "\n";
  return os.str();
}

}  // namespace strata
