#include "backends/floating_point.hpp"

#include "backends/error.hpp"
#include "backends/kokkos.hpp"

namespace strata::fp {

// Not inlined, so that the multiply-add is compiled here, with the
// library's flags, on values the caller passes at run time.
[[gnu::noinline]] float host_multiply_add(float a, float b, float c) { return a * b + c; }

float kernel_multiply_add(float a, float b, float c) {
  Kokkos::View<float*, MemSpace> out("strata::fp::probe", 1);
  Kokkos::parallel_for(
      "strata::fp::probe", Kokkos::RangePolicy<ExecSpace>(0, 1),
      KOKKOS_LAMBDA(const int) { out(0) = a * b + c; });
  auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), out);
  return host(0);
}

std::string contraction_report() {
  // volatile: the values reach the calls as run-time values even when the
  // compiler sees through the calls.
  volatile float a = probe_a, c = probe_c;
  std::string out;
  if (host_multiply_add(a, a, c) != 0.0f) out += "host code";
  if (kernel_multiply_add(a, a, c) != 0.0f) out += out.empty() ? "kernels" : " and kernels";
  return out;
}

void require_no_contraction(const char* what) {
  const std::string report = contraction_report();
  STRATA_REQUIRE(report.empty(), config, what, ": this build of Strata fuses a * b + c into one "
                 "rounding in its ", report, " (floating-point contraction), so its results "
                 "depend on the target CPU and on how each loop was compiled; rebuild with the "
                 "project's CMake, which compiles with -ffp-contract=off (nvcc: --fmad=false), "
                 "and without flags that override it (docs/design-notes.md, section The floating-point contract)");
}

}  // namespace strata::fp
