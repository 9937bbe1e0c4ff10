// The arithmetic under --reproducible, against naive oracles: exact sums
// (backends/exact_sum.hpp) do not depend on the order of their terms and
// equal the sum of the terms rounded to the grid; the reproducible GEMM
// (backends/gemm_reproducible.hpp) is, bit for bit, the one-loop chain of
// std::fma per element, for every shape, transpose, blocking and kernel;
// its chunked form is the exact sum of the chunks' chains, which a Linear
// with an inner chunk (--tp-chunk) rounds once.
#include "backends/blas.hpp"
#include "backends/exact_sum.hpp"
#include "backends/gemm_reproducible.hpp"
#include "backends/launch.hpp"
#include "layers/linear.hpp"
#include "test_utils.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <random>
#include <tuple>

namespace strata {
namespace detail {
template <class T>
void gemm_reproducible_kernel(const ExecSpace& exec, bool generic, Op ta, Op tb, int m, int n,
                              int k, T alpha, const T* A, int lda, const T* B, int ldb, T beta,
                              T* C, int ldc, bool here);
void gemm_exact_chunks_kernel(const ExecSpace& exec, bool generic, Op ta, Op tb, int m, int n,
                              int k, int chunk, const float* A, int lda, const float* B, int ldb,
                              double* E, int lde);
}  // namespace detail

namespace {

// The oracle of exact sums: long double cannot hold them either, so the
// check is structural: the hi and lo parts are multiples of their grids and
// hi + lo is x to within half of lo's grid.
TEST(ExactSum, SplitsOnTheFixedGrid) {
  std::mt19937 g(3);
  std::uniform_real_distribution<double> e(-60, 23);
  for (int t = 0; t < 10000; ++t) {
    const double x = (t % 2 ? -1 : 1) * static_cast<double>(static_cast<float>(std::exp2(e(g))));
    double hi, lo;
    exact_split(x, hi, lo);
    EXPECT_EQ(hi, std::ldexp(std::nearbyint(std::ldexp(hi, 20)), -20)) << x;
    EXPECT_EQ(lo, std::ldexp(std::nearbyint(std::ldexp(lo, 54)), -54)) << x;
    EXPECT_LE(std::fabs(lo), std::ldexp(1.0, -21)) << x;
    // Floats of magnitude >= 2^-30 have no bits below 2^-54: kept whole.
    if (std::fabs(x) >= std::ldexp(1.0, -30)) EXPECT_EQ(hi + lo, x);
    else EXPECT_LE(std::fabs(hi + lo - x), std::ldexp(1.0, -55)) << x;
  }
  double hi, lo;
  exact_split(std::ldexp(1.0, 24), hi, lo);
  EXPECT_TRUE(std::isnan(hi));
  exact_split(std::nan(""), hi, lo);
  EXPECT_TRUE(std::isnan(hi));
  exact_split(-INFINITY, hi, lo);
  EXPECT_TRUE(std::isnan(hi));
}

// Any order and any grouping of the same terms: the same bits, where a
// plain double sum of the same terms differs (so the test can tell).
TEST(ExactSum, OrderAndGroupingDoNotChangeTheSum) {
  std::mt19937 g(5);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::uniform_real_distribution<float> e(-20, 8);
  std::vector<double> terms(5000);
  for (double& t : terms) t = static_cast<double>(n(g) * std::exp2(e(g)));
  ExactSum first;
  for (double t : terms) first.add(t);
  double plain_first = 0;
  for (double t : terms) plain_first += t;
  bool plain_differs = false;
  for (int trial = 0; trial < 20; ++trial) {
    std::shuffle(terms.begin(), terms.end(), g);
    // Groups of random sizes, summed separately, then joined in reverse.
    std::vector<ExactSum> groups;
    double plain = 0;
    for (std::size_t i = 0; i < terms.size();) {
      const std::size_t len = 1 + g() % 97;
      ExactSum s;
      for (std::size_t j = i; j < std::min(terms.size(), i + len); ++j) s.add(terms[j]);
      groups.push_back(s);
      i += len;
    }
    for (double t : terms) plain += t;
    plain_differs = plain_differs || plain != plain_first;
    ExactSum total;
    for (auto it = groups.rbegin(); it != groups.rend(); ++it) total += *it;
    EXPECT_EQ(total.hi, first.hi);
    EXPECT_EQ(total.lo, first.lo);
    EXPECT_EQ(total.value(), first.value());
  }
  EXPECT_TRUE(plain_differs) << "the terms were too tame to tell an exact sum from a plain one";
  // The value is the terms' sum to within the grid (long double as a
  // second opinion on the magnitude).
  long double ref = 0;
  for (double t : terms) ref += t;
  EXPECT_NEAR(first.value(), static_cast<double>(ref), 1e-9);
}

// A gradient's pair that outgrows the grid reads NaN rather than a wrong
// number; a scalar sum (a loss) takes terms beyond the grid as a plain sum.
TEST(ExactSum, AResultBeyondTheGridIsNaN) {
  double pair[2] = {0, 0};
  for (int i = 0; i < 300; ++i) exact_add(pair, 16000000.0);
  EXPECT_TRUE(std::isnan(exact_value(pair[0], pair[1])));
  ExactSum s;
  s.add(1e30);
  s.add(0.25);
  s.add(-3e29);
  EXPECT_EQ(s.value(), 1e30 + -3e29 + 0.25);
  s.add(INFINITY);
  EXPECT_EQ(s.value(), INFINITY);
}

// The values of d summed by a Kokkos reduction (a free function: nvcc
// takes no device lambda in a test's private body).
ExactSum reduce_exact(const MatrixBuffer<float>& d) {
  ExactSum red;
  Kokkos::parallel_reduce(
      "test::exact", Range(0, d.extent(0)),
      KOKKOS_LAMBDA(const std::size_t i, ExactSum& acc) { acc.add(d(i, 0)); }, red);
  return red;
}

// Kokkos reductions join exact sums in any order: the same bits as a loop.
TEST(ExactSum, KokkosReductionEqualsTheLoop) {
  const auto v = test::randn<float>(100000, 11);
  ExactSum loop;
  for (float x : v) loop.add(x);
  const ExactSum red = reduce_exact(test::to_device(v, v.size(), 1));
  EXPECT_EQ(red.hi, loop.hi);
  EXPECT_EQ(red.lo, loop.lo);
}

// The oracle: one std::fma chain per element, p = 0..k-1 from 0.
std::vector<float> fma_chain(Op ta, Op tb, int m, int n, int k, int p0, int p1,
                             const std::vector<float>& a, int lda, const std::vector<float>& b,
                             int ldb) {
  std::vector<float> c(static_cast<std::size_t>(m) * n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      float acc = 0;
      for (int p = p0; p < p1; ++p)
        acc = std::fma(ta == Op::N ? a[i * lda + p] : a[p * lda + i],
                       tb == Op::N ? b[p * ldb + j] : b[j * ldb + p], acc);
      c[static_cast<std::size_t>(i) * n + j] = acc;
    }
  (void)k;
  return c;
}

struct Operands {
  std::vector<float> a, b;
  int lda, ldb;
};
Operands operands(Op ta, Op tb, int m, int n, int k, unsigned seed) {
  const int ar = ta == Op::N ? m : k, ac = ta == Op::N ? k : m;
  const int br = tb == Op::N ? k : n, bc = tb == Op::N ? n : k;
  return {test::randn<float>(ar * ac, seed), test::randn<float>(br * bc, seed + 1), ac, bc};
}

// Shapes of several blocks (96 x 256 per work item, p in blocks of 256,
// 6 x 16 tiles) with partial edges everywhere; both kernels (AVX2 and the
// plain C++ one) and beta 0 and not; host memory views of device data.
TEST(ReproducibleGemm, IsBitwiseTheFmaChainForEveryShape) {
  const std::vector<std::tuple<int, int, int>> shapes = {
      {1, 1, 1}, {7, 33, 5}, {97, 257, 300}, {200, 17, 513}, {6, 16, 256}, {13, 300, 1}};
  for (auto [m, n, k] : shapes)
    for (Op ta : {Op::N, Op::T})
      for (Op tb : {Op::N, Op::T}) {
        const Operands o = operands(ta, tb, m, n, k, 21);
        const auto chain = fma_chain(ta, tb, m, n, k, 0, k, o.a, o.lda, o.b, o.ldb);
        const auto c0 = test::randn<float>(m * n, 23);
        for (bool generic : {false, true})
          for (float beta : {0.0f, 0.5f})
            for (bool here : {false, true}) {  // here: on the calling thread (host builds)
              if (here && !host_kernels) continue;
              std::vector<float> want(c0);
              for (std::size_t e = 0; e < want.size(); ++e)
                want[e] = beta == 0.0f ? 2.0f * chain[e] : 2.0f * chain[e] + beta * want[e];
              const auto da = test::to_device(o.a, o.a.size() / o.lda, o.lda);
              const auto db = test::to_device(o.b, o.b.size() / o.ldb, o.ldb);
              auto dc = test::to_device(c0, m, n);
              detail::gemm_reproducible_kernel<float>(ExecSpace(), generic, ta, tb, m, n, k, 2.0f,
                                                      da.data(), o.lda, db.data(), o.ldb, beta,
                                                      dc.data(), n, here);
              ExecSpace().fence();
              EXPECT_EQ(test::to_host(dc), want)
                  << m << "x" << n << "x" << k << " ta=" << (ta == Op::T) << " tb=" << (tb == Op::T)
                  << " generic=" << generic << " beta=" << beta << " here=" << here;
            }
      }
}

// What Blas does with set_reproducible: the same kernel for every size
// (small GEMMs do not take the inline loops) and either backend.
TEST(ReproducibleGemm, BlasRoutesEveryCallThroughIt) {
  for (GemmBackend backend : {GemmBackend::portable, GemmBackend::vendor}) {
    if (backend == GemmBackend::vendor && !Blas::vendor_available()) continue;
    for (auto [m, n, k] : std::vector<std::tuple<int, int, int>>{{3, 4, 5}, {64, 100, 70}}) {
      const Operands o = operands(Op::N, Op::T, m, n, k, 31);
      const auto want = fma_chain(Op::N, Op::T, m, n, k, 0, k, o.a, o.lda, o.b, o.ldb);
      Blas blas(backend);
      blas.set_reproducible(true);
      auto dc = test::to_device(std::vector<float>(m * n, 0.0f), m, n);
      blas.gemm<float>(Op::N, Op::T, 1.0f, test::to_device(o.a, m, k),
                       test::to_device(o.b, n, k), 0.0f, dc);
      EXPECT_EQ(test::to_host(dc), want) << to_string(backend) << " " << m << "x" << n << "x" << k;
    }
  }
}

// A row of C is the same computed alone or inside a taller matrix (what a
// vendor BLAS does not promise): the property data parallelism needs.
TEST(ReproducibleGemm, ARowDoesNotDependOnTheOtherRows) {
  const int m = 250, n = 300, k = 200;
  const Operands o = operands(Op::N, Op::T, m, n, k, 41);
  auto tall = test::to_device(std::vector<float>(m * n), m, n);
  gemm_reproducible<float>(ExecSpace(), Op::N, Op::T, m, n, k, 1.0f,
                           test::to_device(o.a, m, k).data(), k,
                           test::to_device(o.b, n, k).data(), k, 0.0f, tall.data(), n);
  ExecSpace().fence();
  const auto whole = test::to_host(tall);
  for (int first : {0, 37, 249}) {
    const int rows = std::min(13, m - first);
    std::vector<float> a(o.a.begin() + first * k, o.a.begin() + (first + rows) * k);
    auto part = test::to_device(std::vector<float>(rows * n), rows, n);
    gemm_reproducible<float>(ExecSpace(), Op::N, Op::T, rows, n, k, 1.0f,
                             test::to_device(a, rows, k).data(), k,
                             test::to_device(o.b, n, k).data(), k, 0.0f, part.data(), n);
    ExecSpace().fence();
    EXPECT_EQ(test::to_host(part),
              std::vector<float>(whole.begin() + first * n, whole.begin() + (first + rows) * n))
        << "rows from " << first;
  }
}

// The chunked form (a weight gradient over chunks of the batch): E holds
// the exact sum of each chunk's chain; split the chunks into two calls (two
// ranks, two micro-batches) and add: the same bits. Up to 2048 values of p
// the kernel packs them all and sums a tile's chunks locally; beyond, chunk
// by chunk in p blocks of 256, a chunk longer than a block continuing its
// chain through the block buffer (the fourth shape). A chunk that does not
// divide k leaves a shorter last chunk (the last two shapes). Several row
// and column blocks with partial last panels (the second and the last
// shape) take the path that packs op(A) and op(B) once for all blocks, on
// more than one thread.
TEST(ReproducibleGemm, ExactChunksAreTheExactSumOfEachChunksChain) {
  for (auto [m, n, k, chunk] :
       std::vector<std::tuple<int, int, int, int>>{{37, 70, 48, 8},
                                                   {100, 260, 600, 300},
                                                   {5, 3, 4, 1},
                                                   {20, 30, 2400, 800},
                                                   {9, 11, 50, 8},
                                                   {6, 10, 2100, 400},
                                                   {200, 300, 64, 16}})
    for (bool generic : {false, true}) {
      const Operands o = operands(Op::T, Op::N, m, n, k, 51);  // dW = dy^T x
      std::vector<double> want(2 * m * n, 0.0);
      for (int c0 = 0; c0 < k; c0 += chunk) {
        const auto part =
            fma_chain(Op::T, Op::N, m, n, k, c0, std::min(c0 + chunk, k), o.a, o.lda, o.b, o.ldb);
        for (int e = 0; e < m * n; ++e) exact_add(&want[2 * e], part[e]);
      }
      const auto da = test::to_device(o.a, k, m), db = test::to_device(o.b, k, n);
      Kokkos::View<double*, MemSpace> e1("e1", 2 * m * n), e2("e2", 2 * m * n);
      detail::gemm_exact_chunks_kernel(ExecSpace(), generic, Op::T, Op::N, m, n, k, chunk,
                                       da.data(), m, db.data(), n, e1.data(), n);
      // The same chunks as two calls of (about) half each, into one buffer.
      const int half = (k / chunk / 2) * chunk;
      detail::gemm_exact_chunks_kernel(ExecSpace(), generic, Op::T, Op::N, m, n, half, chunk,
                                       da.data(), m, db.data(), n, e2.data(), n);
      detail::gemm_exact_chunks_kernel(ExecSpace(), generic, Op::T, Op::N, m, n, k - half, chunk,
                                       da.data() + half * m, m, db.data() + half * n, n,
                                       e2.data(), n);
      ExecSpace().fence();
      auto h1 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), e1);
      auto h2 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), e2);
      for (int e = 0; e < 2 * m * n; ++e) {
        ASSERT_EQ(h1(e), want[e]) << m << "x" << n << "x" << k << "/" << chunk << " at " << e;
        ASSERT_EQ(h2(e), want[e]) << "split in two calls, at " << e;
      }
    }
}

// A Linear with an inner chunk (Layer::set_inner_chunk, --tp-chunk): its
// output is, bit for bit, the exact sum of the fma chains over each chunk of
// its input features rounded once, plus the bias; its input gradient the
// same over chunks of output features (10 of them: chunks of 4, 4 and 2).
// And within float rounding of the double product (it computes the layer).
TEST(ReproducibleGemm, LinearWithAnInnerChunkRoundsTheExactSumOfItsChunks) {
  const int rows = 7, in = 12, out = 10, chunk = 4;
  Linear<float> lin(in, out);
  lin.set_inner_chunk(chunk);
  ASSERT_TRUE(lin.exact_forward() && lin.exact_input_grad());
  const auto params = test::randn<float>(out * in + out, 5);
  const auto x = test::randn<float>(rows * in, 6), dy = test::randn<float>(rows * out, 7);
  auto pd = test::to_device(params);
  VectorBuffer<float> gd("grads", params.size());
  lin.bind(pd, gd);
  const auto xd = test::to_device(x, rows, in), dyd = test::to_device(dy, rows, out);
  MatrixBuffer<float> y("y", rows, out), dx("dx", rows, in);
  Context ctx;
  Saved<float> saved;
  saved.x = xd;
  lin.forward(ctx, xd, y, saved);
  lin.backward(ctx, dyd, dx, saved);
  ctx.exec.fence();
  const auto yh = test::to_host(y), dxh = test::to_host(dx);
  const float* w = params.data();
  // (A, B as fma_chain reads them, width n, inner k, the bias or none)
  const auto check = [&](const char* what, Op tb, int n, int k, const std::vector<float>& a,
                         const std::vector<float>& got, const float* bias) {
    std::vector<double> pairs(2 * rows * n, 0.0);
    for (int c0 = 0; c0 < k; c0 += chunk) {
      const auto part = fma_chain(Op::N, tb, rows, n, k, c0, std::min(c0 + chunk, k), a, k, params, in);
      for (int e = 0; e < rows * n; ++e) exact_add(&pairs[2 * e], part[e]);
    }
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < n; ++j) {
        const int e = i * n + j;
        float want = static_cast<float>(exact_value(pairs[2 * e], pairs[2 * e + 1]));
        if (bias) want += bias[j];
        ASSERT_EQ(got[e], want) << what << " (" << i << ", " << j << ")";
        double ref = bias ? bias[j] : 0.0, size = std::fabs(ref);
        for (int p = 0; p < k; ++p) {
          const double t = double(a[i * k + p]) * (tb == Op::T ? w[j * in + p] : w[p * in + j]);
          ref += t;
          size += std::fabs(t);
        }
        // k + 2 roundings of terms of at most `size` (chains, the final one, the bias).
        ASSERT_NEAR(got[e], ref, (k + 2) * FLT_EPSILON * size) << what;
      }
  };
  check("forward", Op::T, out, in, x, yh, w + out * in);
  check("input gradient", Op::N, in, out, dy, dxh, nullptr);
}

}  // namespace
}  // namespace strata
