// The process backend of a build without MPI: one process, never launched
// by mpirun (backends/comm/registry.hpp).
#include "backends/comm/registry.hpp"
#include "backends/comm/self.hpp"

namespace strata::comm {

const ProcessBackend& mpi_backend() {
  static const ProcessBackend backend{
      "mpi",
      false,
      [] { return false; },
      [](int&, char**&) {},
      [] {},
      [] { return false; },
      []() -> std::unique_ptr<Communicator> { return std::make_unique<SelfComm>(); },
      [](int) {},
  };
  return backend;
}

}  // namespace strata::comm
