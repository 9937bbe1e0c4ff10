#include "backends/context.hpp"

#include "backends/trace.hpp"

#include <cstdlib>
#include <cstring>
#include <type_traits>

namespace strata {

int kernel_threads(const ExecSpace& exec) {
#if defined(KOKKOS_ENABLE_OPENMP) && KOKKOS_VERSION < 40000
  // Kokkos 3.x: OpenMP instances carry no pool; the calling thread's
  // partition (OpenMP::partition_master) decides.
  if constexpr (std::is_same<ExecSpace, Kokkos::OpenMP>::value) {
    (void)exec;
    return Kokkos::OpenMP::impl_thread_pool_size();
  }
#endif
#if defined(KOKKOS_ENABLE_OPENMP) && KOKKOS_VERSION >= 40000
  // Kokkos 4.x keeps the deprecated static concurrency(const OpenMP& = OpenMP())
  // (KOKKOS_ENABLE_DEPRECATED_CODE_4, on by default): exec.concurrency() then
  // names the default instance, not exec's partition. Ask the instance.
  if constexpr (std::is_same<ExecSpace, Kokkos::OpenMP>::value) return exec.impl_thread_pool_size();
#endif
  return exec.concurrency();
}

bool inline_kernels_allowed() {
  static const bool allowed = [] {
    const char* v = std::getenv("STRATA_INLINE_KERNELS");
    return !(v != nullptr && std::strcmp(v, "0") == 0) && !trace::kokkos_tools_loaded();
  }();
  return allowed;
}

Context::Context() : threads(kernel_threads(exec)), inline_ok(inline_kernels_allowed()) {}

Context::Context(GemmBackend gemm, ExecSpace space)
    : exec(space), blas(gemm, space), threads(kernel_threads(space)), inline_ok(inline_kernels_allowed()) {}

}  // namespace strata
