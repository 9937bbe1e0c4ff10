// The CUDA runtime under the NCCL communicator (backends/comm/nccl_runtime.hpp).
#include "backends/comm/nccl_runtime.hpp"

#include "backends/host_error.hpp"

#include <cuda_runtime.h>

namespace strata::comm::gpu {

namespace {
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    STRATA_THROW(runtime, "CUDA: ", what, " failed: ", cudaGetErrorString(e));
}
cudaStream_t native(Stream s) { return static_cast<cudaStream_t>(s); }
}  // namespace

const char* name() { return "CUDA"; }

int device_count() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0)
    STRATA_THROW(runtime, "no CUDA device: ",
                 e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports 0 devices",
                 " (NCCL and cuBLAS need a GPU; use the threads or mpi communicator on CPUs)");
  return n;
}

void set_device(int device) { check(cudaSetDevice(device), "cudaSetDevice"); }

int current_device() {
  int d = 0;
  check(cudaGetDevice(&d), "cudaGetDevice");
  return d;
}

void* allocate(std::size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, bytes), "cudaMalloc");
  return p;
}

void release(void* p) noexcept { (void)cudaFree(p); }

void copy(void* dst, const void* src, std::size_t bytes) {
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), "cudaMemcpy");
}

void copy_on(Stream stream, void* dst, const void* src, std::size_t bytes) {
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, native(stream)),
        "cudaMemcpyAsync");
}

Stream create_stream() {
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  return s;
}

void destroy_stream(Stream stream) noexcept { (void)cudaStreamDestroy(native(stream)); }

bool finished(Stream stream, const char* what) {
  const cudaError_t e = cudaStreamQuery(native(stream));
  if (e == cudaErrorNotReady) return false;
  check(e, what);
  return true;
}

void synchronize(Stream stream) {
  check(cudaStreamSynchronize(native(stream)), "cudaStreamSynchronize");
}

void synchronize_device() { check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

}  // namespace strata::comm::gpu
