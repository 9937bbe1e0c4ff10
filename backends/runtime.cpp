#include "backends/runtime.hpp"

#include "backends/blas.hpp"
#include "backends/comm/registry.hpp"
#include "backends/comm/self.hpp"
#include "backends/kokkos.hpp"
#include "strata_config.hpp"

#include <cstdlib>
#include <sstream>

namespace strata {

Runtime::Runtime(int& argc, char** argv) {
  // libgomp has already read OMP_PROC_BIND (unset means no binding) when main
  // starts; saying so explicitly only silences Kokkos 3.x's warning about it.
  setenv("OMP_PROC_BIND", "false", /*overwrite=*/0);
  const auto& mpi = comm::mpi_backend();
  if (mpi.launched()) mpi.initialize(argc, argv);
  Kokkos::initialize(argc, argv);
}

Runtime::~Runtime() {
  if (Kokkos::is_initialized()) Kokkos::finalize();
  comm::mpi_backend().finalize();
}

bool launched_by_mpi() { return comm::mpi_backend().launched(); }

void Runtime::abort(int code) {
  comm::mpi_backend().abort(code);
  std::exit(code);
}

std::unique_ptr<comm::Communicator> world_communicator() {
  const auto& mpi = comm::mpi_backend();
  if (mpi.initialized()) return mpi.world();
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
     << "communicators: " << comm::compiled_communicators() << "\n";
  return os.str();
}

}  // namespace strata
