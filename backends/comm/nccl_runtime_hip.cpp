// The HIP runtime under the NCCL communicator on RCCL (backends/comm/nccl_runtime.hpp).
#include "backends/comm/nccl_runtime.hpp"

#include "backends/host_error.hpp"

#include <hip/hip_runtime_api.h>

namespace strata::comm::gpu {

namespace {
void check(hipError_t e, const char* what) {
  if (e != hipSuccess)
    STRATA_THROW(runtime, "HIP: ", what, " failed: ", hipGetErrorString(e));
}
hipStream_t native(Stream s) { return static_cast<hipStream_t>(s); }
}  // namespace

const char* name() { return "HIP"; }

int device_count() {
  int n = 0;
  const hipError_t e = hipGetDeviceCount(&n);
  if (e != hipSuccess || n == 0)
    STRATA_THROW(runtime, "no HIP device: ",
                 e != hipSuccess ? hipGetErrorString(e) : "the runtime reports 0 devices",
                 " (RCCL and hipBLAS need a GPU; use the threads or mpi communicator on CPUs)");
  return n;
}

void set_device(int device) { check(hipSetDevice(device), "hipSetDevice"); }

int current_device() {
  int d = 0;
  check(hipGetDevice(&d), "hipGetDevice");
  return d;
}

void* allocate(std::size_t bytes) {
  void* p = nullptr;
  check(hipMalloc(&p, bytes), "hipMalloc");
  return p;
}

void release(void* p) noexcept { (void)hipFree(p); }

void copy(void* dst, const void* src, std::size_t bytes) {
  check(hipMemcpy(dst, src, bytes, hipMemcpyDefault), "hipMemcpy");
}

void copy_on(Stream stream, void* dst, const void* src, std::size_t bytes) {
  check(hipMemcpyAsync(dst, src, bytes, hipMemcpyDeviceToDevice, native(stream)),
        "hipMemcpyAsync");
}

Stream create_stream() {
  hipStream_t s = nullptr;
  check(hipStreamCreateWithFlags(&s, hipStreamNonBlocking), "hipStreamCreate");
  return s;
}

void destroy_stream(Stream stream) noexcept { (void)hipStreamDestroy(native(stream)); }

bool finished(Stream stream, const char* what) {
  const hipError_t e = hipStreamQuery(native(stream));
  if (e == hipErrorNotReady) return false;
  check(e, what);
  return true;
}

void synchronize(Stream stream) {
  check(hipStreamSynchronize(native(stream)), "hipStreamSynchronize");
}

void synchronize_device() { check(hipDeviceSynchronize(), "hipDeviceSynchronize"); }

}  // namespace strata::comm::gpu
