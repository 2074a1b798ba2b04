// Every code point of e4m3fn, e2m1 and ue8m0, and the rounding rules of their encoders.
#include "core/number_formats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace dsv4 {
namespace {

// Brute force: the nearest code among `codes` (ties to the even code), the oracle for encoders.
template <typename Decode>
uint8_t nearest_code(float x, int ncodes, Decode decode) {
  int best = -1;
  double best_d = 0;
  for (int c = 0; c < ncodes; ++c) {
    const float v = decode(static_cast<uint8_t>(c));
    if (std::isnan(v) || std::signbit(v) != std::signbit(x)) continue;
    const double d = std::fabs(static_cast<double>(v) - x);
    if (best < 0 || d < best_d || (d == best_d && (c & 1) == 0 && (best & 1) == 1)) {
      best = c;
      best_d = d;
    }
  }
  return static_cast<uint8_t>(best);
}

TEST(E4M3, DecodesEveryCodePoint) {
  EXPECT_EQ(e4m3_to_float(0x00), 0.0f);
  EXPECT_TRUE(std::signbit(e4m3_to_float(0x80)));
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(e4m3_to_float(0x07), 7 * std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_to_float(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_float(0x3c), 1.5f);
  EXPECT_EQ(e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_float(0xfe), -448.0f);
  EXPECT_TRUE(std::isnan(e4m3_to_float(0x7f)));
  EXPECT_TRUE(std::isnan(e4m3_to_float(0xff)));
  // Strictly increasing over the positive codes, and exactly mirrored by the sign bit.
  for (int c = 1; c < 0x7f; ++c) {
    EXPECT_LT(e4m3_to_float(static_cast<uint8_t>(c - 1)), e4m3_to_float(static_cast<uint8_t>(c))) << c;
    EXPECT_EQ(e4m3_to_float(static_cast<uint8_t>(c | 0x80)), -e4m3_to_float(static_cast<uint8_t>(c)));
  }
}

TEST(E4M3, EncodeInvertsDecodeOnEveryFiniteCode) {
  for (int c = 0; c < 256; ++c) {
    const float v = e4m3_to_float(static_cast<uint8_t>(c));
    if (std::isnan(v)) continue;
    EXPECT_EQ(float_to_e4m3(v), c) << "code " << c << " value " << v;
  }
}

TEST(E4M3, MidpointsRoundToEvenCode) {
  for (int c = 0; c < 0x7e; ++c) {
    const float lo = e4m3_to_float(static_cast<uint8_t>(c)), hi = e4m3_to_float(static_cast<uint8_t>(c + 1));
    const float mid = (lo + hi) / 2;  // exact in fp32
    const int even = (c % 2 == 0) ? c : c + 1;
    EXPECT_EQ(float_to_e4m3(mid), even) << "between codes " << c << " and " << c + 1;
    EXPECT_EQ(float_to_e4m3(std::nextafter(mid, 0.0f)), c);
    EXPECT_EQ(float_to_e4m3(std::nextafter(mid, 1e9f)), c + 1);
    EXPECT_EQ(float_to_e4m3(-mid), 0x80 | even);
  }
}

TEST(E4M3, SaturatesAndHandlesSpecials) {
  EXPECT_EQ(float_to_e4m3(448.0f), 0x7e);
  EXPECT_EQ(float_to_e4m3(464.0f), 0x7e);  // the midpoint to the NaN code saturates
  EXPECT_EQ(float_to_e4m3(1e6f), 0x7e);
  EXPECT_EQ(float_to_e4m3(-1e6f), 0xfe);
  EXPECT_EQ(float_to_e4m3(std::numeric_limits<float>::infinity()), 0x7e);
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.0f, -11)), 0x00);  // below half the smallest subnormal
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.0f, -10)), 0x00);  // exactly half: tie to even (0)
  EXPECT_EQ(float_to_e4m3(std::ldexp(3.0f, -10)), 0x02);  // 1.5 x 2^-9: tie to even (2)
  EXPECT_EQ(float_to_e4m3(std::ldexp(3.0f, -11)), 0x01);  // 0.75 x 2^-9 rounds up
  EXPECT_EQ(float_to_e4m3(NAN), 0x7f);
}

TEST(E4M3, MatchesBruteForceOnRandomValues) {
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> exp(-12.0f, 9.5f);
  std::uniform_int_distribution<int> sign(0, 1);
  for (int i = 0; i < 20000; ++i) {
    float x = std::exp2(exp(rng)) * (sign(rng) ? -1.0f : 1.0f);
    x = std::fmin(std::fmax(x, -448.0f), 448.0f);
    ASSERT_EQ(float_to_e4m3(x), nearest_code(x, 256, e4m3_to_float)) << x;
  }
}

TEST(E2M1, DecodesEveryCodePoint) {
  const float expected[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int c = 0; c < 16; ++c) {
    EXPECT_EQ(e2m1_to_float(static_cast<uint8_t>(c)), expected[c]) << c;
    EXPECT_EQ(std::signbit(e2m1_to_float(static_cast<uint8_t>(c))), c >= 8) << c;
    EXPECT_EQ(float_to_e2m1(expected[c]), c) << c;
  }
}

TEST(E2M1, TiesGoToTheEvenCodeAndLargeValuesSaturate) {
  EXPECT_EQ(float_to_e2m1(0.25f), 0);
  EXPECT_EQ(float_to_e2m1(0.75f), 2);
  EXPECT_EQ(float_to_e2m1(1.25f), 2);
  EXPECT_EQ(float_to_e2m1(1.75f), 4);
  EXPECT_EQ(float_to_e2m1(2.5f), 4);
  EXPECT_EQ(float_to_e2m1(3.5f), 6);
  EXPECT_EQ(float_to_e2m1(5.0f), 6);
  EXPECT_EQ(float_to_e2m1(-5.0f), 14);
  EXPECT_EQ(float_to_e2m1(5.01f), 7);
  EXPECT_EQ(float_to_e2m1(100.0f), 7);
  EXPECT_EQ(float_to_e2m1(-0.1f), 8);
  EXPECT_EQ(float_to_e2m1(NAN), 7);
  for (float mid : {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f}) {  // just off each midpoint
    EXPECT_EQ(float_to_e2m1(std::nextafter(mid, 0.0f)) + 1, float_to_e2m1(std::nextafter(mid, 9.0f))) << mid;
  }
  std::mt19937 rng(99);
  std::uniform_real_distribution<float> u(-6.5f, 6.5f);
  for (int i = 0; i < 20000; ++i) {
    const float x = u(rng);
    const float clamped = std::fmin(std::fmax(x, -6.0f), 6.0f);
    ASSERT_EQ(float_to_e2m1(x), nearest_code(clamped, 16, e2m1_to_float)) << x;
  }
}

TEST(Fp4Packing, LowNibbleFirst) {
  const uint8_t packed[2] = {0x21, 0xf7};  // elements: 1, 2, 7, 15
  EXPECT_EQ(fp4_at(packed, 0), 1);
  EXPECT_EQ(fp4_at(packed, 1), 2);
  EXPECT_EQ(fp4_at(packed, 2), 7);
  EXPECT_EQ(fp4_at(packed, 3), 15);
}

TEST(UE8M0, DecodesEveryCodePoint) {
  for (int e = 0; e < 255; ++e) EXPECT_EQ(ue8m0_to_float(static_cast<uint8_t>(e)), std::ldexp(1.0f, e - 127)) << e;
  EXPECT_TRUE(std::isnan(ue8m0_to_float(255)));
}

TEST(UE8M0, CeilPow2IsTheSmallestPowerOfTwoNotBelow) {
  EXPECT_EQ(ue8m0_ceil_pow2(1.0f), 127);
  EXPECT_EQ(ue8m0_ceil_pow2(std::nextafter(1.0f, 2.0f)), 128);
  EXPECT_EQ(ue8m0_ceil_pow2(0.75f), 127);
  EXPECT_EQ(ue8m0_ceil_pow2(0.5f), 126);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> exp(-100.0f, 100.0f);
  for (int i = 0; i < 10000; ++i) {
    const float v = std::exp2(exp(rng));
    const float s = ue8m0_to_float(ue8m0_ceil_pow2(v));
    ASSERT_GE(s, v);
    ASSERT_LT(s / 2, v);
  }
}

TEST(BF16, RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f), 0x3f80);      // tie, even stays
  EXPECT_EQ(float_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
  EXPECT_EQ(float_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
  EXPECT_EQ(float_to_bf16(3.4e38f), 0x7f80);  // rounds past the largest bf16 to infinity
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float v = bf16_to_float(static_cast<uint16_t>(b));
    if (std::isnan(v)) continue;
    ASSERT_EQ(float_to_bf16(v), b);
  }
}

}  // namespace
}  // namespace dsv4
