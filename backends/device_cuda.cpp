// CUDA builds of Kokkos (backends/device.hpp).
#include "backends/device.hpp"

#include "backends/error.hpp"

#include <cuda_runtime.h>

#include <cstdio>

namespace strata::device {

const char* platform() { return "CUDA"; }

int count() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0)
    STRATA_THROW(runtime, "no CUDA device: ",
                 e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports 0 devices",
                 " (this build's kernels run on CUDA; build Strata with a host Kokkos for CPUs)");
  return n;
}

int current() {
  int d = -1;
  if (cudaGetDevice(&d) != cudaSuccess) return -1;
  return d;
}

std::string describe(int device) {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess)
    return "CUDA device " + std::to_string(device);
  char buf[320];
  std::snprintf(buf, sizeof buf, "%s, %.1f GiB, compute capability %d.%d", p.name,
                static_cast<double>(p.totalGlobalMem) / (1u << 30), p.major, p.minor);
  return buf;
}

void* stream_of(const ExecSpace& exec) { return exec.cuda_stream(); }

}  // namespace strata::device
