// The device a process runs its kernels on, and which of a node's devices a
// rank takes.
//
// Host builds (OpenMP, Threads, Serial) have no device: count() is 0 and
// every rank runs on the host. CUDA and HIP builds run one device per process,
// chosen before Kokkos starts (Runtime does it):
//
//   --device N (a program's option)        device N of those visible
//   otherwise                              node-local rank modulo the devices
//                                          visible (Open MPI, MPICH, Slurm)
//
// so that the processes of a node spread over its GPUs, and a job that binds
// one GPU per task (CUDA_VISIBLE_DEVICES, srun --gpus-per-task=1) takes the
// one it sees. Kokkos, the vendor BLAS and NCCL then all use that device.
//
// The platform part (device_host.cpp, or device_gpu.cpp for CUDA and HIP
// through backends/gpu_api.hpp) is chosen by CMake with the Kokkos backend.
#pragma once

#include "backends/kokkos.hpp"

#include <string>

namespace strata::device {

// "CUDA", "HIP", or "" on a host build.
const char* platform();
// Devices visible to this process: 0 on a host build. On a GPU build, throws
// runtime with the vendor runtime's message when none can be used.
int count();
// The device this process's kernels run on (after Kokkos started); -1 on a
// host build.
int current();
// "NVIDIA H200, 139.8 GiB" for a device; "host" on a host build.
std::string describe(int device);
// The vendor stream of an execution-space instance (cudaStream_t,
// hipStream_t), for libraries that order their work on it (NCCL); nullptr on
// a host build.
void* stream_of(const ExecSpace& exec);

// Whether p points into device memory (memory host code must not touch):
// the vendor runtime's pointer attributes on GPU builds (managed memory
// counts as host memory); on host builds never, except under the
// device-memory check (backends/device_check.hpp), where every Kokkos
// allocation is device memory.
bool is_device(const void* p);
// Whether any pointer can be device memory here (a GPU build, or the check):
// false lets callers skip is_device on host builds.
bool has_device_memory();
// Copies bytes between any two of host and device memory (synchronous).
void copy(void* dst, const void* src, std::size_t bytes);

// Node-local rank from the launcher's environment (Open MPI, MPICH, MVAPICH,
// Slurm, PMI), or -1 when unknown.
int local_rank_from_environment();
// The device a process takes: `requested` when >= 0 (checked against
// `visible`), else local_rank modulo `visible` (device 0 when unknown).
// Throws config naming the option when requested is out of range.
int choose(int requested, int local_rank, int visible);
// The Kokkos option that selects it: "--kokkos-device-id=N" (Kokkos 3.4 and
// newer read this spelling).
std::string kokkos_option(int device);

}  // namespace strata::device
