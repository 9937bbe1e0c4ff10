// 16-bit storage types against naive references: every one of the 65536 bit
// patterns of bf16 and fp16 round-trips through float; float -> bf16/fp16
// rounding equals round-to-nearest-even computed naively in double (nearest
// representable value, ties to the even mantissa) on a million floats that
// cover every exponent, the ties, the overflow threshold and the subnormals;
// the flat-buffer kernels equal the scalar conversions.
#include "backends/precision.hpp"
#include "test_utils.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace strata {
namespace {

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
std::uint32_t to_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Naive value of a bf16 / fp16 pattern, from the format's definition.
double naive_value(std::uint16_t b, int exp_bits, int man_bits) {
  const int bias = (1 << (exp_bits - 1)) - 1;
  const int e = (b >> man_bits) & ((1 << exp_bits) - 1);
  const int m = b & ((1 << man_bits) - 1);
  const double s = (b >> 15) ? -1.0 : 1.0;
  if (e == (1 << exp_bits) - 1)
    return m ? std::numeric_limits<double>::quiet_NaN() : s * HUGE_VAL;
  if (e == 0) return s * std::ldexp(m, 1 - bias - man_bits);
  return s * std::ldexp((1 << man_bits) + m, e - bias - man_bits);
}

template <class L>
void check_round_trip(int exp_bits, int man_bits) {
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const L x = L::from_bits(static_cast<std::uint16_t>(b));
    const float f = static_cast<float>(x);
    const double want = naive_value(static_cast<std::uint16_t>(b), exp_bits, man_bits);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << b;
      const L back(f);
      ASSERT_TRUE(std::isnan(static_cast<float>(back))) << std::hex << b;
      ASSERT_EQ(back.bits & 0x8000, b & 0x8000) << "NaN keeps its sign " << std::hex << b;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), want) << std::hex << b;
    ASSERT_EQ(L(f).bits, b) << "round trip of " << std::hex << b;
  }
}

TEST(Precision, Bf16AllPatternsRoundTrip) { check_round_trip<bf16>(8, 7); }
TEST(Precision, Fp16AllPatternsRoundTrip) { check_round_trip<fp16>(5, 10); }

// Naive float -> 16-bit rounding: the nearest finite value in the sorted
// table of all non-negative finite values (ties: even pattern); beyond the
// largest finite value, Inf from halfway to the next power step on.
template <class L>
std::uint16_t naive_round(float f, const std::vector<double>& table, double overflow) {
  const std::uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(f));
  const auto inf = static_cast<std::uint16_t>(table.size());  // first pattern past the finite ones
  if (a >= overflow) return sign | inf;
  const auto it = std::lower_bound(table.begin(), table.end(), a);
  std::size_t hi = it - table.begin();
  if (hi == table.size()) hi = table.size() - 1;
  if (table[hi] == a) return sign | static_cast<std::uint16_t>(hi);
  const std::size_t lo = hi - 1;
  const double dlo = a - table[lo], dhi = table[hi] - a;
  if (dlo < dhi) return sign | static_cast<std::uint16_t>(lo);
  if (dhi < dlo) return sign | static_cast<std::uint16_t>(hi);
  return sign | static_cast<std::uint16_t>(lo % 2 == 0 ? lo : hi);
}

template <class L>
void check_rounding(int exp_bits, int man_bits) {
  // Non-negative finite patterns are 0 .. (Inf pattern - 1), increasing in value.
  const std::uint16_t inf = static_cast<std::uint16_t>(((1 << exp_bits) - 1) << man_bits);
  std::vector<double> table;
  for (std::uint16_t b = 0; b < inf; ++b) table.push_back(naive_value(b, exp_bits, man_bits));
  // Halfway between the largest finite value and the next step rounds to Inf.
  const double top = table.back(), step = top - table[table.size() - 2];
  const double overflow = top + step / 2;
  std::vector<float> cases;
  for (std::uint64_t u = 0; u < (1ull << 32); u += 4099) cases.push_back(from_bits(static_cast<std::uint32_t>(u)));
  // Exact ties and their neighbours at every representable value.
  for (std::uint16_t b = 0; b < inf; ++b) {
    const double mid = b + 1 < inf ? (table[b] + table[b + 1]) / 2 : overflow;
    const float m = static_cast<float>(mid);
    if (static_cast<double>(m) != mid) continue;  // tie not representable in float
    for (float v : {m, std::nextafter(m, 0.0f), std::nextafter(m, HUGE_VALF)}) {
      cases.push_back(v);
      cases.push_back(-v);
    }
  }
  cases.push_back(HUGE_VALF);
  cases.push_back(-HUGE_VALF);
  cases.push_back(std::numeric_limits<float>::max());
  cases.push_back(std::numeric_limits<float>::denorm_min());
  std::size_t checked = 0;
  for (float f : cases) {
    const std::uint16_t got = L(f).bits;
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(static_cast<float>(L::from_bits(got)))) << std::hex << to_bits(f);
      continue;
    }
    ASSERT_EQ(got, naive_round<L>(f, table, overflow))
        << "float " << f << " (bits " << std::hex << to_bits(f) << ")";
    ++checked;
  }
  EXPECT_GT(checked, 1000000u);
}

TEST(Precision, Bf16RoundingMatchesNaiveNearestEven) { check_rounding<bf16>(8, 7); }
TEST(Precision, Fp16RoundingMatchesNaiveNearestEvenWithSubnormals) { check_rounding<fp16>(5, 10); }

TEST(Precision, SpecialValues) {
  EXPECT_EQ(bf16(1.0f).bits, 0x3f80);
  EXPECT_EQ(fp16(1.0f).bits, 0x3c00);
  EXPECT_EQ(fp16(65504.0f).bits, 0x7bff);   // largest fp16
  EXPECT_EQ(fp16(65519.0f).bits, 0x7bff);   // below the halfway point
  EXPECT_EQ(fp16(65520.0f).bits, 0x7c00);   // halfway: rounds to even = Inf
  EXPECT_EQ(fp16(5.9604644775390625e-8f).bits, 0x0001);  // 2^-24, smallest subnormal
  EXPECT_EQ(fp16(2.98023223876953125e-8f).bits, 0x0000); // 2^-25: tie to even, 0
  EXPECT_EQ(fp16(-0.0f).bits, 0x8000);
  EXPECT_EQ(bf16(-0.0f).bits, 0x8000);
  EXPECT_EQ(bf16(3.4028235e38f).bits, 0x7f80);  // float max rounds to Inf in bf16
  EXPECT_TRUE(std::isinf(static_cast<float>(bf16(HUGE_VALF))));
  EXPECT_TRUE(std::isnan(static_cast<float>(bf16(std::nanf("")))));
  EXPECT_TRUE(std::isnan(static_cast<float>(fp16(std::nanf("")))));
  EXPECT_EQ(parse_precision("bf16"), Precision::bf16);
  EXPECT_THROW(parse_precision("fp8"), Error);
}

template <class L>
void check_kernels() {
  std::vector<float> x = test::randn<float>(10007, 3);
  for (float& v : x) v *= 1000.0f;
  x[0] = HUGE_VALF;
  x[1] = 1e-6f;
  auto dx = test::to_device(x);
  VectorBuffer<L> low("low", x.size());
  VectorBuffer<float> back("back", x.size()), rounded("rounded", x.size());
  convert<float, L>(ExecSpace(), dx, low);
  convert<L, float>(ExecSpace(), low, back);
  Kokkos::deep_copy(rounded, dx);
  round_in_place<L>(ExecSpace(), rounded);
  const auto hl = test::to_host(low);
  const auto hb = test::to_host(back), hr = test::to_host(rounded);
  for (std::size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(hl[i].bits, L(x[i]).bits) << i;
    ASSERT_EQ(to_bits(hb[i]), to_bits(static_cast<float>(L(x[i])))) << i;
    ASSERT_EQ(to_bits(hr[i]), to_bits(hb[i])) << i;
  }
}

TEST(Precision, FlatBufferKernelsEqualScalarConversions) {
  check_kernels<bf16>();
  check_kernels<fp16>();
}

}  // namespace
}  // namespace strata
