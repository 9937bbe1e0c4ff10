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

bool is_device(const void* p) {
  if (p == nullptr) return false;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();  // older runtimes fail on plain host memory: not device memory
    return false;
  }
  return a.type == cudaMemoryTypeDevice;
}

bool has_device_memory() { return true; }

void copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  const cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
  if (e != cudaSuccess)
    STRATA_THROW(runtime, "CUDA: copy of ", bytes, " bytes failed: ", cudaGetErrorString(e));
}

void* stream_of(const ExecSpace& exec) { return exec.cuda_stream(); }

}  // namespace strata::device
