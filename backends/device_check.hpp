// The device-memory check: on a host build, host code that touches device
// memory given to a communicator fails as it would on a GPU.
//
// On a GPU, a transport that reads a device buffer with memcpy (or a 16-bit
// sum, or an average on the host) crashes; on CPUs the same code works,
// because "device" memory is host memory. Under the check
// (STRATA_DEVICE_CHECK=1, host builds), every Kokkos allocation counts as
// device memory (device::is_device), so the communicators' front doors stage
// such buffers for transports that work on host memory, exactly as on a GPU.
// A buffer that does reach a transport in device memory has its pages made
// inaccessible while the transport runs, except where the transport hands it
// to a library that takes device memory (an Access scope: CUDA-aware MPI,
// the copy engine). Host code touching it then stops the process with
// SIGSEGV, and the handler names the operation and the buffer.
//
// Limits: only whole pages inside a buffer are protected (buffers under two
// pages may escape), and only while a communicator runs: kernels and the
// strategies' own staging are not checked. Costs a few system calls per
// operation; a test mode, never for speed.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>
#include <vector>

namespace strata::device::check {

struct Region {
  const void* p;
  std::size_t bytes;
};

// Whether the check runs (start() was called).
bool enabled();
// STRATA_DEVICE_CHECK=1 is set; throws config on a GPU build, where the
// hardware checks.
bool requested();
// Starts the check: registers Kokkos allocations from now on and installs
// the SIGSEGV handler. Call right after Kokkos::initialize (Runtime and the
// test main do when requested()). Idempotent.
void start();
// Whether p lies in a Kokkos allocation made since start().
bool in_device_allocation(const void* p);

// While alive, the whole pages of the regions that are device memory are
// inaccessible to every thread of the process. `what` names them in the
// handler's message ("allreduce of the threads communicator").
class Protect {
 public:
  Protect(std::initializer_list<Region> regions, std::string what);
  ~Protect();
  Protect(const Protect&) = delete;
  Protect& operator=(const Protect&) = delete;

 private:
  std::vector<Region> pages_;
};

// While alive, protected pages of the regions are accessible again (a
// library that takes device memory, the copy engine). Nests with Protect.
class Access {
 public:
  explicit Access(std::initializer_list<Region> regions);
  ~Access();
  Access(const Access&) = delete;
  Access& operator=(const Access&) = delete;

 private:
  std::vector<Region> pages_;
};

}  // namespace strata::device::check
