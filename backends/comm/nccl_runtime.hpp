// The GPU runtime under the NCCL communicator: CUDA's with NCCL, HIP's with
// RCCL (nccl_runtime_gpu.cpp, written once over backends/gpu_api.hpp;
// CMake compiles it for the runtime of the library). A stream is the vendor's (cudaStream_t, hipStream_t) as a
// void*. Failures throw runtime naming the call and with the runtime's own
// message; functions that free resources never throw.
#pragma once

#include <cstddef>

namespace strata::comm::gpu {

using Stream = void*;

// "CUDA" or "HIP".
const char* name();
// Number of devices; throws "no CUDA device" ("no HIP device") when there is
// none or the driver cannot be used.
int device_count();
void set_device(int device);
int current_device();

// Device memory.
void* allocate(std::size_t bytes);
void release(void* p) noexcept;
// Synchronous copy between any two of host and device memory.
void copy(void* dst, const void* src, std::size_t bytes);
// Device-to-device copy ordered on `stream`.
void copy_on(Stream stream, void* dst, const void* src, std::size_t bytes);

// A stream that does not wait for the legacy default stream.
Stream create_stream();
void destroy_stream(Stream stream) noexcept;
// Whether everything enqueued on `stream` has finished (false: still
// running); throws on an error of the stream's work, naming `what`.
bool finished(Stream stream, const char* what);
void synchronize(Stream stream);
void synchronize_device();

}  // namespace strata::comm::gpu
