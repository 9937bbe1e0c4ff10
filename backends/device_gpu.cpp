// GPU builds of Kokkos, CUDA or HIP (backends/device.hpp), through the one
// runtime facade (backends/gpu_api.hpp).
#include "backends/device.hpp"

#include "backends/error.hpp"
#include "backends/gpu_api.hpp"

#include <cstdio>

namespace strata::device {

const char* platform() { return gpu_api::kPlatform; }

int count() {
  int n = 0;
  const gpu_api::Error e = gpu_api::device_count(&n);
  if (e != gpu_api::kSuccess || n == 0)
    STRATA_THROW(runtime, "no ", gpu_api::kPlatform, " device: ",
                 e != gpu_api::kSuccess ? gpu_api::error_string(e) : "the runtime reports 0 devices",
                 " (this build's kernels run on ", gpu_api::kPlatform,
                 "; build Strata with a host Kokkos for CPUs)");
  return n;
}

int current() {
  int d = -1;
  if (gpu_api::get_device(&d) != gpu_api::kSuccess) return -1;
  return d;
}

std::string describe(int device) {
  std::string name, arch;
  double bytes = 0;
  if (!gpu_api::describe(device, name, bytes, arch))
    return std::string(gpu_api::kPlatform) + " device " + std::to_string(device);
  char buf[320];
  std::snprintf(buf, sizeof buf, "%s, %.1f GiB, %s", name.c_str(), bytes / (1u << 30), arch.c_str());
  return buf;
}

bool is_device(const void* p) {
  if (p == nullptr) return false;
  bool device = false;
  if (gpu_api::pointer_is_device(p, &device) != gpu_api::kSuccess) {
    (void)gpu_api::clear_error();  // plain host memory is an error to some runtimes: not device memory
    return false;
  }
  return device;
}

bool has_device_memory() { return true; }

void copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  const gpu_api::Error e = gpu_api::copy(dst, src, bytes);
  if (e != gpu_api::kSuccess)
    STRATA_THROW(runtime, gpu_api::kPlatform, ": copy of ", bytes, " bytes failed: ",
                 gpu_api::error_string(e));
}

void* stream_of(const ExecSpace& exec) { return gpu_api::stream_of(exec); }

}  // namespace strata::device
