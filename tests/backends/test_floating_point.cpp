// The floating-point contract (backends/floating_point.hpp): no contraction
// of a * b + c in the library's host code, in its kernels (on a GPU too) and
// in the tests' own reference loops; and the compiler defects that the
// build works around (cmake/StrataFloatingPoint.cmake) do not show.
#include "backends/floating_point.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace strata {
namespace {

constexpr float fused_result = 1.0f / (1 << 24);  // 2^-24

// The oracle for the checks below: the probe's inputs tell one rounding
// (std::fma, correctly rounded by definition) from two (the product stored
// to a volatile float, which rounds it whatever the flags).
TEST(FloatingPoint, ProbeTellsOneRoundingFromTwo) {
  volatile float a = fp::probe_a, c = fp::probe_c;
  EXPECT_EQ(std::fma(static_cast<float>(a), static_cast<float>(a), static_cast<float>(c)),
            fused_result);
  volatile float product = a * a;
  EXPECT_EQ(product + c, 0.0f);
}

TEST(FloatingPoint, LibraryHostCodeRoundsTwice) {
  volatile float a = fp::probe_a, c = fp::probe_c;
  EXPECT_EQ(fp::host_multiply_add(a, a, c), 0.0f)
      << "the library's host code fuses a * b + c (compiled with contraction)";
}

TEST(FloatingPoint, KernelsRoundTwice) {
  volatile float a = fp::probe_a, c = fp::probe_c;
  EXPECT_EQ(fp::kernel_multiply_add(a, a, c), 0.0f)
      << "kernels on the default execution space fuse a * b + c (nvcc without --fmad=false?)";
  EXPECT_EQ(fp::contraction_report(), "");
  EXPECT_NO_THROW(fp::require_no_contraction("test"));
}

// The tests' reference loops (a GEMM's dot product, a LayerNorm) are
// compared bit for bit with the library's kernels: they keep the contract too.
[[gnu::noinline]] float test_multiply_add(float a, float b, float c) { return a * b + c; }

TEST(FloatingPoint, TestCodeRoundsTwice) {
  volatile float a = fp::probe_a, c = fp::probe_c;
  EXPECT_EQ(test_multiply_add(a, a, c), 0.0f);
}

// GCC 12.2 with AVX-512 (-march=x86-64-v4 and the like, -O2 and above)
// compiles a copy of a 32- or 64-byte constant whose low part repeats one
// value and whose high part is zero into a broadcast of that value: the
// expected {1, 1, 1, 1, 0, 0, 0, 0} of LayerNorm.InitIsOnesAndZeros became
// {1, 1, 1, 1, 1, 1, 1, 1}. The build probes for the defect and works around
// it; these copies fail without the work-around on a CPU with AVX-512.
// Oracle: each element from its index.
[[gnu::noinline]] void copy_floats8(float* p) {
  const float v[8] = {1, 1, 1, 1, 0, 0, 0, 0};
  std::memcpy(p, v, sizeof v);
}
[[gnu::noinline]] void copy_floats16(float* p) {
  const float v[16] = {1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  std::memcpy(p, v, sizeof v);
}
[[gnu::noinline]] void copy_doubles4(double* p) {
  const double v[4] = {2, 2, 0, 0};
  std::memcpy(p, v, sizeof v);
}
[[gnu::noinline]] void copy_ints8(std::int32_t* p) {
  const std::int32_t v[8] = {7, 7, 7, 7, 0, 0, 0, 0};
  std::memcpy(p, v, sizeof v);
}
[[gnu::noinline]] std::vector<float> list_floats8() { return {1, 1, 1, 1, 0, 0, 0, 0}; }

TEST(CompilerDefects, ConstantsWithAZeroHighHalfAreCopiedAsWritten) {
  float f8[8], f16[16];
  double d4[4];
  std::int32_t i8[8];
  copy_floats8(f8);
  copy_floats16(f16);
  copy_doubles4(d4);
  copy_ints8(i8);
  const std::vector<float> l8 = list_floats8();
  ASSERT_EQ(l8.size(), 8u);
  for (std::size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(f8[i], i < 4 ? 1.0f : 0.0f) << "float[8] element " << i;
    EXPECT_EQ(i8[i], i < 4 ? 7 : 0) << "int32[8] element " << i;
    EXPECT_EQ(l8[i], i < 4 ? 1.0f : 0.0f) << "initializer list element " << i;
  }
  for (std::size_t i = 0; i < 16; ++i) EXPECT_EQ(f16[i], i < 4 ? 1.0f : 0.0f) << "float[16] element " << i;
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(d4[i], i < 2 ? 2.0 : 0.0) << "double[4] element " << i;
}

}  // namespace
}  // namespace strata
