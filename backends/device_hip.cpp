// HIP builds of Kokkos (backends/device.hpp).
#include "backends/device.hpp"

#include "backends/error.hpp"

#include <hip/hip_runtime.h>

#include <cstdio>

namespace strata::device {

const char* platform() { return "HIP"; }

int count() {
  int n = 0;
  const hipError_t e = hipGetDeviceCount(&n);
  if (e != hipSuccess || n == 0)
    STRATA_THROW(runtime, "no HIP device: ",
                 e != hipSuccess ? hipGetErrorString(e) : "the runtime reports 0 devices",
                 " (this build's kernels run on HIP; build Strata with a host Kokkos for CPUs)");
  return n;
}

int current() {
  int d = -1;
  if (hipGetDevice(&d) != hipSuccess) return -1;
  return d;
}

std::string describe(int device) {
  hipDeviceProp_t p{};
  if (hipGetDeviceProperties(&p, device) != hipSuccess)
    return "HIP device " + std::to_string(device);
  char buf[320];
  std::snprintf(buf, sizeof buf, "%s, %.1f GiB, %s", p.name,
                static_cast<double>(p.totalGlobalMem) / (1u << 30), p.gcnArchName);
  return buf;
}

void* stream_of(const ExecSpace& exec) { return exec.hip_stream(); }

}  // namespace strata::device
