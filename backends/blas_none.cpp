// No vendor BLAS for this build's memory space: Blas uses the portable Kokkos
// GEMM (see blas.hpp). The vendor entry points are never reached because
// Blas refuses GemmBackend::vendor when vendor_available() is false.
#include "backends/blas.hpp"
#include "backends/error.hpp"

namespace strata::detail {

bool vendor_available() { return false; }
bool vendor_sequential_in_parallel() { return false; }
std::string vendor_name() { return "none"; }
void* vendor_create(const ExecSpace&) { return nullptr; }
void vendor_destroy(void*) {}

void vendor_gemm(void*, Op, Op, int, int, int, float, const float*, int, const float*, int,
                 float, float*, int) {
  STRATA_THROW(config, "no vendor BLAS compiled in");
}
bool vendor_gemm_16(void*, Precision, Op, Op, int, int, int, float, const float*, int,
                    const float*, int, float, float*, int) {
  return false;
}
void vendor_gemm(void*, Op, Op, int, int, int, double, const double*, int, const double*, int,
                 double, double*, int) {
  STRATA_THROW(config, "no vendor BLAS compiled in");
}

}  // namespace strata::detail
