#include "backends/runtime.hpp"

#include "backends/blas.hpp"
#include "backends/comm/registry.hpp"
#include "backends/comm/self.hpp"
#include "backends/device.hpp"
#include "backends/device_check.hpp"
#include "backends/environment.hpp"
#include "backends/kokkos.hpp"
#include "strata_config.hpp"

#include <cstdlib>
#include <cstring>
#include <sstream>
#include <vector>

namespace strata {

namespace {
// Whether argv already tells Kokkos which device to use.
bool names_device(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    for (const char* o : {"--kokkos-device-id", "--kokkos-device=", "--kokkos-num-devices",
                          "--kokkos-ndevices", "--kokkos-map-device-id-by"})
      if (argv[i] != nullptr && std::strncmp(argv[i], o, std::strlen(o)) == 0) return true;
  return false;
}
}  // namespace

Runtime::Runtime(int& argc, char** argv, int device) {
  // libgomp has already read OMP_PROC_BIND (unset means no binding) when main
  // starts; saying so explicitly only silences Kokkos 3.x's warning about it.
  setenv("OMP_PROC_BIND", "false", /*overwrite=*/0);
  const bool gpu = *device::platform() != '\0';
  STRATA_REQUIRE(gpu || device < 0, config, "--device ", device, ": this build runs its kernels on ",
                 ExecSpace::name(), " (host threads), not on a GPU");
  const auto& mpi = comm::mpi_backend();
  if (mpi.launched()) mpi.initialize(argc, argv);
  if (!gpu || names_device(argc, argv)) {
    Kokkos::initialize(argc, argv);
    if (device::check::requested()) device::check::start();
    return;
  }
  // argv plus the device option; Kokkos removes the options it reads.
  const std::string option = device::kokkos_option(
      device::choose(device, device::local_rank_from_environment(), device::count()));
  std::vector<char*> args(argv, argv + argc);
  args.push_back(const_cast<char*>(option.c_str()));
  args.push_back(nullptr);
  int n = argc + 1;
  Kokkos::initialize(n, args.data());
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
     << ExecSpace::name();
  if (*device::platform() != '\0' && Kokkos::is_initialized())
    os << ", device " << device::current() << ": " << device::describe(device::current());
  os << "), GEMM " << Blas::vendor_name();
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
  os << environment_report();
  if (*device::platform() != '\0') {
    os << device::platform() << " devices: ";
    try {
      const int n = device::count();
      os << n << " visible";
      for (int d = 0; d < n; ++d) os << (d ? "; " : " (") << d << ": " << device::describe(d);
      os << ")\n";
    } catch (const Error& e) {
      os << "none usable (" << e.message() << ")\n";
    }
  }
  return os.str();
}

}  // namespace strata
