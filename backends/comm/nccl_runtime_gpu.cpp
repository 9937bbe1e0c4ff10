// The GPU runtime under the NCCL communicator: CUDA under NCCL, HIP under
// RCCL (backends/comm/nccl_runtime.hpp), through the one runtime facade
// (backends/gpu_api.hpp).
#include "backends/comm/nccl_runtime.hpp"

#include "backends/gpu_api.hpp"
#include "backends/host_error.hpp"

namespace strata::comm::gpu {

namespace {
// what: the runtime call, named without its platform prefix ("Malloc").
void check(gpu_api::Error e, const char* what) {
  if (e != gpu_api::kSuccess)
    STRATA_THROW(runtime, gpu_api::kPlatform, ": ", gpu_api::kCallPrefix, what, " failed: ",
                 gpu_api::error_string(e));
}
gpu_api::Stream native(Stream s) { return static_cast<gpu_api::Stream>(s); }
}  // namespace

const char* name() { return gpu_api::kPlatform; }

int device_count() {
  int n = 0;
  const gpu_api::Error e = gpu_api::device_count(&n);
  if (e != gpu_api::kSuccess || n == 0)
    STRATA_THROW(runtime, "no ", gpu_api::kPlatform, " device: ",
                 e != gpu_api::kSuccess ? gpu_api::error_string(e) : "the runtime reports 0 devices",
                 " (", gpu_api::kCollectives, " and ", gpu_api::kBlas,
                 " need a GPU; use the threads or mpi communicator on CPUs)");
  return n;
}

void set_device(int device) { check(gpu_api::set_device(device), "SetDevice"); }

int current_device() {
  int d = 0;
  check(gpu_api::get_device(&d), "GetDevice");
  return d;
}

void* allocate(std::size_t bytes) {
  void* p = nullptr;
  check(gpu_api::malloc_device(&p, bytes), "Malloc");
  return p;
}

void release(void* p) noexcept { (void)gpu_api::free_device(p); }

void copy(void* dst, const void* src, std::size_t bytes) {
  check(gpu_api::copy(dst, src, bytes), "Memcpy");
}

void copy_on(Stream stream, void* dst, const void* src, std::size_t bytes) {
  check(gpu_api::copy_device_async(dst, src, bytes, native(stream)), "MemcpyAsync");
}

Stream create_stream() {
  gpu_api::Stream s = nullptr;
  check(gpu_api::create_stream(&s), "StreamCreate");
  return s;
}

void destroy_stream(Stream stream) noexcept { (void)gpu_api::destroy_stream(native(stream)); }

bool finished(Stream stream, const char* what) {
  const gpu_api::Error e = gpu_api::query_stream(native(stream));
  if (e == gpu_api::kNotReady) return false;
  if (e != gpu_api::kSuccess)
    STRATA_THROW(runtime, gpu_api::kPlatform, ": ", what, " failed: ", gpu_api::error_string(e));
  return true;
}

void synchronize(Stream stream) { check(gpu_api::synchronize_stream(native(stream)), "StreamSynchronize"); }

void synchronize_device() { check(gpu_api::synchronize_device(), "DeviceSynchronize"); }

}  // namespace strata::comm::gpu
