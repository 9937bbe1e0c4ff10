// GEMM backends against a naive host reference (double accumulation), for odd
// shapes and every transpose combination; vendor against portable.
#include "backends/blas.hpp"
#include "backends/error.hpp"
#include "backends/launch.hpp"
#include "test_utils.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

namespace strata {
namespace {

// C = alpha op(A) op(B) + beta C on host, row-major.
template <class T>
std::vector<T> reference_gemm(Op ta, Op tb, int m, int n, int k, T alpha, const std::vector<T>& A,
                              int lda, const std::vector<T>& B, int ldb, T beta, std::vector<T> C,
                              int ldc) {
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double acc = 0;
      for (int p = 0; p < k; ++p) {
        const double a = ta == Op::N ? A[i * lda + p] : A[p * lda + i];
        const double b = tb == Op::N ? B[p * ldb + j] : B[j * ldb + p];
        acc += a * b;
      }
      C[i * ldc + j] = static_cast<T>(alpha * acc + (beta == T(0) ? 0.0 : beta * double(C[i * ldc + j])));
    }
  return C;
}

// inline_small: let GEMMs below inline_gemm_limit run as plain loops (what
// Strata does); otherwise the backend itself runs at every shape.
// inputs: A and B are rounded to that precision and the Blas is told so
// (Blas::set_float_inputs; on cuBLAS a 16-bit-input GEMM).
template <class T>
void check_gemm(GemmBackend backend, Op ta, Op tb, int m, int n, int k, T alpha, T beta,
                bool inline_small = false, Precision inputs = Precision::fp32) {
  // Stored shapes: A (m,k) or (k,m); B (k,n) or (n,k).
  const int ar = ta == Op::N ? m : k, ac = ta == Op::N ? k : m;
  const int br = tb == Op::N ? k : n, bc = tb == Op::N ? n : k;
  auto a = test::randn<T>(ar * ac, 1), b = test::randn<T>(br * bc, 2), c = test::randn<T>(m * n, 3);
  if (inputs != Precision::fp32)
    for (auto* v : {&a, &b})
      for (T& x : *v) x = inputs == Precision::bf16 ? T(float(bf16(float(x)))) : T(float(fp16(float(x))));
  auto expect = reference_gemm(ta, tb, m, n, k, alpha, a, ac, b, bc, beta, c, n);
  auto da = test::to_device(a, ar, ac), db = test::to_device(b, br, bc), dc = test::to_device(c, m, n);
  Blas blas(backend);
  blas.set_inline_small(inline_small);
  blas.set_float_inputs(inputs);
  blas.gemm<T>(ta, tb, alpha, da, db, beta, dc);
  auto got = test::to_host(dc);
  const double tol = std::is_same<T, float>::value ? 2e-5 : 1e-12;
  for (int i = 0; i < m * n; ++i)
    ASSERT_NEAR(got[i], expect[i], tol * (std::sqrt(double(k)) + std::fabs(expect[i])))
        << to_string(backend) << " m=" << m << " n=" << n << " k=" << k << " ta="
        << (ta == Op::T) << " tb=" << (tb == Op::T) << " at " << i;
}

using Shape = std::tuple<int, int, int>;
class GemmShapes : public ::testing::TestWithParam<Shape> {};

TEST_P(GemmShapes, PortableMatchesReference) {
  auto [m, n, k] = GetParam();
  for (Op ta : {Op::N, Op::T})
    for (Op tb : {Op::N, Op::T}) {
      check_gemm<float>(GemmBackend::portable, ta, tb, m, n, k, 1.0f, 0.0f);
      check_gemm<double>(GemmBackend::portable, ta, tb, m, n, k, 0.5, 2.0);
    }
}

TEST_P(GemmShapes, VendorMatchesReference) {
  if (!Blas::vendor_available()) GTEST_SKIP() << "no vendor BLAS compiled in";
  auto [m, n, k] = GetParam();
  for (Op ta : {Op::N, Op::T})
    for (Op tb : {Op::N, Op::T}) {
      check_gemm<float>(GemmBackend::vendor, ta, tb, m, n, k, 1.0f, 1.0f);
      check_gemm<double>(GemmBackend::vendor, ta, tb, m, n, k, -1.5, 0.0);
    }
}

TEST_P(GemmShapes, InlineSmallMatchesReference) {
  auto [m, n, k] = GetParam();
  for (Op ta : {Op::N, Op::T})
    for (Op tb : {Op::N, Op::T}) {
      check_gemm<float>(GemmBackend::portable, ta, tb, m, n, k, 1.0f, 1.0f, true);
      check_gemm<double>(GemmBackend::portable, ta, tb, m, n, k, -1.5, 0.0, true);
    }
}

INSTANTIATE_TEST_SUITE_P(OddShapes, GemmShapes,
                         ::testing::Combine(::testing::Values(1, 7, 33, 257),
                                            ::testing::Values(1, 7, 33, 257),
                                            ::testing::Values(1, 7, 33, 257)));

// Operands holding bf16/fp16 values, declared so (Blas::set_float_inputs):
// cuBLAS runs a 16-bit-input GEMM (scripts/gpu-check.sh); a CBLAS ignores
// the declaration and runs sgemm, so on CPU builds this checks that
// fallback. Products of such values are exact in float, so the fp32
// tolerance holds. One test over the shape grid (not 64 entries: on CPU it
// proves little beyond the sgemm rows above).
TEST(Gemm, SixteenBitInputsMatchReferenceSgemmFallbackOnCpu) {
  if (!Blas::vendor_available()) GTEST_SKIP() << "no vendor BLAS compiled in";
  for (int m : {1, 7, 33, 257})
    for (int n : {1, 7, 33, 257})
      for (int k : {1, 7, 33, 257})
        for (Precision p : {Precision::bf16, Precision::fp16})
          for (Op ta : {Op::N, Op::T})
            for (Op tb : {Op::N, Op::T})
              check_gemm<float>(GemmBackend::vendor, ta, tb, m, n, k, 1.0f, 0.5f, false, p);
}

// GEMMs below inline_gemm_limit run as plain loops; they must be bitwise the
// portable kernel (same dot product, same order), for every transpose.
TEST(Gemm, InlineSmallIsBitwiseThePortableKernel) {
  if (!host_kernels) GTEST_SKIP() << "kernels run on a device: nothing runs inline";
  if (!inline_kernels_allowed()) GTEST_SKIP() << "inline kernels are off (STRATA_INLINE_KERNELS=0 or a Kokkos tool)";
  const std::vector<std::tuple<int, int, int>> shapes = {{32, 5, 10}, {5, 10, 32}, {32, 10, 5},
                                                         {3, 1, 7}, {15, 16, 17}};
  for (auto [m, n, k] : shapes) {
    ASSERT_TRUE(gemm_runs_inline(m, n, k)) << m << "x" << n << "x" << k;
    for (Op ta : {Op::N, Op::T})
      for (Op tb : {Op::N, Op::T})
        for (float beta : {0.0f, 0.75f}) {
          const int ar = ta == Op::N ? m : k, ac = ta == Op::N ? k : m;
          const int br = tb == Op::N ? k : n, bc = tb == Op::N ? n : k;
          auto a = test::to_device(test::randn<float>(ar * ac, 4), ar, ac);
          auto b = test::to_device(test::randn<float>(br * bc, 5), br, bc);
          const auto c0 = test::randn<float>(m * n, 6);
          auto c_inline = test::to_device(c0, m, n), c_kernel = test::to_device(c0, m, n);
          Blas blas(GemmBackend::portable);
          blas.gemm<float>(ta, tb, 1.25f, a, b, beta, c_inline);
          blas.set_inline_small(false);
          blas.gemm<float>(ta, tb, 1.25f, a, b, beta, c_kernel);
          EXPECT_EQ(test::to_host(c_inline), test::to_host(c_kernel))
              << m << "x" << n << "x" << k << " ta=" << (ta == Op::T) << " tb=" << (tb == Op::T)
              << " beta=" << beta;
        }
  }
  EXPECT_FALSE(gemm_runs_inline(64, 64, 64));
}

TEST(Gemm, BetaZeroIgnoresNaNInOutput) {
  for (GemmBackend backend : {GemmBackend::portable, GemmBackend::vendor}) {
    if (backend == GemmBackend::vendor && !Blas::vendor_available()) continue;
    auto da = test::to_device(std::vector<float>{1, 2, 3, 4}, 2, 2);
    auto dc = test::to_device(std::vector<float>(4, std::nanf("")), 2, 2);
    Blas(backend).gemm<float>(Op::N, Op::N, 1.0f, da, da, 0.0f, dc);
    EXPECT_EQ(test::to_host(dc), (std::vector<float>{7, 10, 15, 22})) << to_string(backend);
  }
}

// The tiled portable kernel sums every element's products in the order
// p = 0..k-1, whatever the tiles: bitwise the one-loop dot product, on
// shapes of several tiles and k-blocks with partial edges (64 x 64 tiles,
// k in blocks of 16), every transpose, beta 0 and not.
TEST(Gemm, TiledPortableKernelIsBitwiseTheOneLoopDotProduct) {
  // On a GPU too: the build compiles device code without contraction
  // (nvcc --fmad=false, hipcc -ffp-contract=off; test_floating_point checks).
  const std::vector<std::tuple<int, int, int>> shapes = {{130, 70, 37}, {65, 129, 16}, {64, 64, 1},
                                                         {3, 200, 50}};
  for (auto [m, n, k] : shapes)
    for (Op ta : {Op::N, Op::T})
      for (Op tb : {Op::N, Op::T})
        for (float beta : {0.0f, -0.5f}) {
          const int ar = ta == Op::N ? m : k, ac = ta == Op::N ? k : m;
          const int br = tb == Op::N ? k : n, bc = tb == Op::N ? n : k;
          const auto a = test::randn<float>(ar * ac, 7), b = test::randn<float>(br * bc, 8);
          const auto c0 = test::randn<float>(m * n, 9);
          std::vector<float> want(c0);
          for (int i = 0; i < m; ++i)
            for (int j = 0; j < n; ++j) {
              float acc = 0;
              for (int p = 0; p < k; ++p)
                acc += (ta == Op::N ? a[i * ac + p] : a[p * ac + i]) *
                       (tb == Op::N ? b[p * bc + j] : b[j * bc + p]);
              float& c = want[i * n + j];
              c = beta == 0.0f ? 1.5f * acc : 1.5f * acc + beta * c;
            }
          auto dc = test::to_device(c0, m, n);
          Blas blas(GemmBackend::portable);
          blas.set_inline_small(false);
          blas.gemm<float>(ta, tb, 1.5f, test::to_device(a, ar, ac), test::to_device(b, br, bc), beta, dc);
          EXPECT_EQ(test::to_host(dc), want) << m << "x" << n << "x" << k << " ta=" << (ta == Op::T)
                                             << " tb=" << (tb == Op::T) << " beta=" << beta;
        }
}

TEST(Gemm, ShapeMismatchIsAConfigError) {
  auto da = test::to_device(std::vector<float>(6, 1.0f), 2, 3);
  auto dc = test::to_device(std::vector<float>(4, 0.0f), 2, 2);
  try {
    Blas(GemmBackend::portable).gemm<float>(Op::N, Op::N, 1.0f, da, da, 0.0f, dc);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config);
    EXPECT_NE(std::string(e.what()).find("shapes do not match"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata
