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

bool is_device(const void* p) {
  if (p == nullptr) return false;
  hipPointerAttribute_t a{};
  if (hipPointerGetAttributes(&a, p) != hipSuccess) {
    (void)hipGetLastError();  // plain host memory is an error to some runtimes: not device memory
    return false;
  }
#if HIP_VERSION_MAJOR >= 6
  return a.type == hipMemoryTypeDevice;
#else
  return a.memoryType == hipMemoryTypeDevice;  // ROCm 5 names the field memoryType
#endif
}

bool has_device_memory() { return true; }

void copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  const hipError_t e = hipMemcpy(dst, src, bytes, hipMemcpyDefault);
  if (e != hipSuccess)
    STRATA_THROW(runtime, "HIP: copy of ", bytes, " bytes failed: ", hipGetErrorString(e));
}

void* stream_of(const ExecSpace& exec) { return exec.hip_stream(); }

}  // namespace strata::device
