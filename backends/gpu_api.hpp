// The GPU vendor runtime under one set of names: the one place that tells the
// CUDA runtime from HIP's (compiled with STRATA_GPU_HIP=1 for HIP, else CUDA).
// What runs above it is written once: the device glue of the Kokkos backend
// (backends/device_gpu.cpp) and the runtime under the NCCL/RCCL communicator
// (backends/comm/nccl_runtime_gpu.cpp). Plain C++ against the runtime API (no
// Kokkos), so that the communicator's glue builds with the host compiler.
#pragma once

#if STRATA_GPU_HIP
#include <hip/hip_runtime_api.h>
#else
#include <cuda_runtime_api.h>
#endif

#include <string>

namespace strata::gpu_api {

#if STRATA_GPU_HIP
constexpr const char* kPlatform = "HIP";
constexpr const char* kCallPrefix = "hip";  // of the runtime's functions, in errors
constexpr const char* kCollectives = "RCCL";
constexpr const char* kBlas = "hipBLAS";
using Error = hipError_t;
using Stream = hipStream_t;
constexpr Error kSuccess = hipSuccess;
constexpr Error kNotReady = hipErrorNotReady;
inline const char* error_string(Error e) { return hipGetErrorString(e); }
inline Error clear_error() { return hipGetLastError(); }
inline Error device_count(int* n) { return hipGetDeviceCount(n); }
inline Error get_device(int* d) { return hipGetDevice(d); }
inline Error set_device(int d) { return hipSetDevice(d); }
inline Error malloc_device(void** p, std::size_t bytes) { return hipMalloc(p, bytes); }
inline Error free_device(void* p) { return hipFree(p); }
inline Error copy(void* dst, const void* src, std::size_t bytes) {
  return hipMemcpy(dst, src, bytes, hipMemcpyDefault);
}
inline Error copy_device_async(void* dst, const void* src, std::size_t bytes, Stream s) {
  return hipMemcpyAsync(dst, src, bytes, hipMemcpyDeviceToDevice, s);
}
inline Error create_stream(Stream* s) { return hipStreamCreateWithFlags(s, hipStreamNonBlocking); }
inline Error destroy_stream(Stream s) { return hipStreamDestroy(s); }
inline Error query_stream(Stream s) { return hipStreamQuery(s); }
inline Error synchronize_stream(Stream s) { return hipStreamSynchronize(s); }
inline Error synchronize_device() { return hipDeviceSynchronize(); }
// "name, 64.0 GiB, gfx90a"; false when the runtime does not answer.
inline bool describe(int device, std::string& name, double& bytes, std::string& arch) {
  hipDeviceProp_t p{};
  if (hipGetDeviceProperties(&p, device) != hipSuccess) return false;
  name = p.name;
  bytes = static_cast<double>(p.totalGlobalMem);
  arch = p.gcnArchName;
  return true;
}
// *device: whether the runtime knows p as device memory; the call's status
// (plain host memory is an error to some runtimes).
inline Error pointer_is_device(const void* p, bool* device) {
  hipPointerAttribute_t a{};
  const Error e = hipPointerGetAttributes(&a, p);
#if HIP_VERSION_MAJOR >= 6
  *device = e == hipSuccess && a.type == hipMemoryTypeDevice;
#else
  *device = e == hipSuccess && a.memoryType == hipMemoryTypeDevice;  // ROCm 5: memoryType
#endif
  return e;
}
// The native stream of a Kokkos execution space instance.
template <class Exec>
void* stream_of(const Exec& exec) {
  return exec.hip_stream();
}
#else
constexpr const char* kPlatform = "CUDA";
constexpr const char* kCallPrefix = "cuda";
constexpr const char* kCollectives = "NCCL";
constexpr const char* kBlas = "cuBLAS";
using Error = cudaError_t;
using Stream = cudaStream_t;
constexpr Error kSuccess = cudaSuccess;
constexpr Error kNotReady = cudaErrorNotReady;
inline const char* error_string(Error e) { return cudaGetErrorString(e); }
inline Error clear_error() { return cudaGetLastError(); }
inline Error device_count(int* n) { return cudaGetDeviceCount(n); }
inline Error get_device(int* d) { return cudaGetDevice(d); }
inline Error set_device(int d) { return cudaSetDevice(d); }
inline Error malloc_device(void** p, std::size_t bytes) { return cudaMalloc(p, bytes); }
inline Error free_device(void* p) { return cudaFree(p); }
inline Error copy(void* dst, const void* src, std::size_t bytes) {
  return cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
}
inline Error copy_device_async(void* dst, const void* src, std::size_t bytes, Stream s) {
  return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s);
}
inline Error create_stream(Stream* s) { return cudaStreamCreateWithFlags(s, cudaStreamNonBlocking); }
inline Error destroy_stream(Stream s) { return cudaStreamDestroy(s); }
inline Error query_stream(Stream s) { return cudaStreamQuery(s); }
inline Error synchronize_stream(Stream s) { return cudaStreamSynchronize(s); }
inline Error synchronize_device() { return cudaDeviceSynchronize(); }
// "name, 80.0 GiB, compute capability 9.0"; false when the runtime does not answer.
inline bool describe(int device, std::string& name, double& bytes, std::string& arch) {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) return false;
  name = p.name;
  bytes = static_cast<double>(p.totalGlobalMem);
  arch = "compute capability " + std::to_string(p.major) + "." + std::to_string(p.minor);
  return true;
}
// *device: whether the runtime knows p as device memory; the call's status
// (older runtimes fail on plain host memory).
inline Error pointer_is_device(const void* p, bool* device) {
  cudaPointerAttributes a{};
  const Error e = cudaPointerGetAttributes(&a, p);
  *device = e == cudaSuccess && a.type == cudaMemoryTypeDevice;
  return e;
}
template <class Exec>
void* stream_of(const Exec& exec) {
  return exec.cuda_stream();
}
#endif

}  // namespace strata::gpu_api
