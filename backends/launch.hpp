// Kernel launches that cost nothing when there is nothing to share.
//
// Every layer, loss and optimizer kernel is written once as a Kokkos functor
// and launched through for_range / sum_range. On a device they are ordinary
// Kokkos launches. On host back-ends a launch opens a parallel region (an
// OpenMP fork and join, or a wake-up of the Threads pool), which costs one to
// a few microseconds; the tiny models of the tutorial (W1: 32 x 10 inputs)
// compute for less than that. So on the host a kernel runs inline, as a plain
// loop on the calling thread, when
//   - the rank's execution space has one thread (a thread rank of 1 thread,
//     an MPI process with --threads 1): a region of one thread only adds
//     the fork, or
//   - its work (items x work per item) is below inline_work_limit.
// The functor and the order of the arithmetic inside each item are the same
// either way; only a sum over items (sum_range) may be added in another order,
// as Kokkos' own reductions are with another thread count.
//
// Kokkos Tools see every kernel as a kernel launch: when a tool is loaded
// (KOKKOS_TOOLS_LIBS) nothing runs inline.
//
// On the host, items also run in chunks: each thread gets whole chunks and
// runs each chunk as one loop that the compiler is told carries no
// dependence between iterations (what parallel_for promises anyway), so that
// it vectorises (an Adam step ran scalar before).
#pragma once

#include "backends/context.hpp"
#include "backends/host_clones.hpp"
#include "backends/kernel_shapes.hpp"

#include <chrono>
#include <cstddef>
#include <type_traits>

// The loop after it has no dependence between iterations.
#if defined(__clang__)
#define STRATA_IVDEP _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define STRATA_IVDEP _Pragma("GCC ivdep")
#else
#define STRATA_IVDEP
#endif

namespace strata {

// Below this many element operations a host kernel runs inline: a 2-thread
// fork and join (1-3 us, quiet) costs what 10-30 thousand simple element
// updates cost (strata-bench-micro's launch/ rows time both sides).
inline constexpr std::size_t inline_work_limit = std::size_t(1) << 14;

// Whether kernels of this build run on the host (then they may run inline).
inline constexpr bool host_kernels =
    Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible &&
    std::is_same<ExecSpace, HostExecSpace>::value;

// Whether a kernel of `work` element operations runs inline on this context.
inline bool runs_inline(const Context& ctx, std::size_t work) {
  if constexpr (host_kernels)
    return ctx.inline_ok && (ctx.threads == 1 || work < inline_work_limit);
  else
    return false;
}

// Element operations per chunk of a host kernel (a multiple of every vector
// width; items of more work get chunks of fewer items).
inline constexpr std::size_t host_chunk = 2048;

namespace detail {
// While kernel_shapes records (strata-train --kernel-shapes): fences before
// and after a launch and records its name, items and time.
class ShapeTimer {
 public:
  ShapeTimer(const Context& ctx, const char* name, std::size_t items)
      : ctx_(ctx), name_(name), items_(items), on_(kernel_shapes::enabled()) {
    if (!on_) return;
    ctx.exec.fence();
    start_ = std::chrono::steady_clock::now();
  }
  ~ShapeTimer() {
    if (!on_) return;
    ctx_.exec.fence();
    kernel_shapes::record(
        name_, items_,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }
  ShapeTimer(const ShapeTimer&) = delete;
  ShapeTimer& operator=(const ShapeTimer&) = delete;

 private:
  const Context& ctx_;
  const char* name_;
  std::size_t items_;
  bool on_;
  std::chrono::steady_clock::time_point start_;
};

// Host items, also compiled as an x86-64-v3 clone (backends/host_clones.hpp):
// a baseline build's loops run in AVX2 lanes where the CPU has them.
template <class F>
STRATA_HOST_CLONES inline void run_items(const F& f, std::size_t begin, std::size_t end) {
  STRATA_IVDEP
  for (std::size_t i = begin; i < end; ++i) f(i);
}
}  // namespace detail

namespace detail {
// for_range without the kernel-shape record.
template <class F>
void launch_range(const Context& ctx, const char* name, std::size_t n, const F& f,
                  std::size_t work_per_item) {
  if constexpr (host_kernels) {
    if (runs_inline(ctx, n * work_per_item)) {
      run_items(f, 0, n);
      return;
    }
    // Chunks of about host_chunk element operations.
    const std::size_t chunk =
        work_per_item >= host_chunk ? 1 : host_chunk / (work_per_item > 0 ? work_per_item : 1);
    const std::size_t chunks = (n + chunk - 1) / chunk;
    Kokkos::parallel_for(name, Range(ctx.exec, 0, chunks), [=](const std::size_t c) {
      const std::size_t begin = c * chunk;
      run_items(f, begin, begin + chunk < n ? begin + chunk : n);
    });
  } else {
    Kokkos::parallel_for(name, Range(ctx.exec, 0, n), f);
  }
}
}  // namespace detail

// f(i) for i in [0, n): Kokkos::parallel_for on ctx.exec, or inline.
// `work_per_item` estimates the element operations of one item (a row loop
// over `cols` columns: cols).
template <class F>
void for_range(const Context& ctx, const char* name, std::size_t n, const F& f,
               std::size_t work_per_item = 1) {
  const detail::ShapeTimer shape(ctx, name, n);
  detail::launch_range(ctx, name, n, f, work_per_item);
}

// dst[i] += src[i] for i in [0, n) (a free function: nvcc refuses device
// lambdas in private member functions, so classes call this instead).
template <class D, class S>
void add_into(const Context& ctx, const char* name, D* dst, const S* src, std::size_t n) {
  for_range(ctx, name, n, KOKKOS_LAMBDA(const std::size_t i) { dst[i] += src[i]; });
}

// f(row(i), i, j) for i in [0, rows), j in [0, cols): an elementwise kernel
// over a matrix, rows x cols items, with what a row shares (its statistics,
// its offsets) computed by row(i). On a device one item per element, which
// calls row(i) itself; on the host one item per row: row(i) once, then its
// columns as one loop (vectorised: the row's values stay in registers, no
// division per element). The kernel-shape record counts rows x cols.
template <class Row, class F>
void for_elements(const Context& ctx, const char* name, std::size_t rows, std::size_t cols,
                  const Row& row, const F& f) {
  const detail::ShapeTimer shape(ctx, name, rows * cols);
  if constexpr (host_kernels) {
    detail::launch_range(ctx, name, rows, [=](const std::size_t i) {
          const auto r = row(i);
          STRATA_IVDEP
          for (std::size_t j = 0; j < cols; ++j) f(r, i, j);
        },
        cols);
  } else {
    detail::launch_range(ctx, name, rows * cols, KOKKOS_LAMBDA(const std::size_t k) {
          const std::size_t i = k / cols;
          f(row(i), i, k - i * cols);
        },
        1);
  }
}

// f(i) for i in [0, n) on the host threads of ctx, for items that call host
// libraries (a sequential BLAS, see Blas::sequential_in_kernels): f is a
// host lambda, and a build whose kernels run on a device never gets here.
template <class F>
void for_host_items(const Context& ctx, const char* name, std::size_t n, const F& f,
                    std::size_t work_per_item) {
  const detail::ShapeTimer shape(ctx, name, n);
  if constexpr (host_kernels) {
    if (runs_inline(ctx, n * work_per_item)) {
      for (std::size_t i = 0; i < n; ++i) f(i);
      return;
    }
    Kokkos::parallel_for(name, Range(ctx.exec, 0, n), f);
  } else {
    (void)ctx, (void)n, (void)f, (void)work_per_item;
    Kokkos::abort(name);  // unreachable: callers check host_kernels
  }
}

// sum = sum over i in [0, n) of what f(i, acc) adds to acc (acc starts at 0).
template <class F, class S>
void sum_range(const Context& ctx, const char* name, std::size_t n, const F& f, S& sum,
               std::size_t work_per_item = 1) {
  const detail::ShapeTimer shape(ctx, name, n);
  if constexpr (host_kernels) {
    if (runs_inline(ctx, n * work_per_item)) {
      S acc = S();
      for (std::size_t i = 0; i < n; ++i) f(i, acc);
      sum = acc;
      return;
    }
  }
  Kokkos::parallel_reduce(name, Range(ctx.exec, 0, n), f, sum);
}

}  // namespace strata
