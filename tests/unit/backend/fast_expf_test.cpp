// fast_expf against the correctly rounded exp (std::exp in double, rounded once to float) on every 61st
// float of its range and on the edges, and the fast tier's SwiGLU sigmoid built on it: NUMERICS.md allows
// approximate transcendentals within 4 ulp: fast_expf keeps 1.
#include "backend/fast_expf.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace dsv4 {
namespace {

float exp_rounded(float x) { return static_cast<float>(std::exp(static_cast<double>(x))); }

// Distance in units in the last place between two finite floats of one sign (their bit patterns are
// ordered like their magnitudes).
int64_t ulps(float a, float b) {
  return std::abs(static_cast<int64_t>(std::bit_cast<uint32_t>(a)) - static_cast<int64_t>(std::bit_cast<uint32_t>(b)));
}

// Largest ulp distance of fast_expf over the floats with bit patterns first, first + stride, ... < last.
int64_t worst_over(uint32_t first, uint32_t last, uint32_t stride) {
  int64_t worst = 0;
  for (uint64_t u = first; u < last; u += stride) {
    const float x = std::bit_cast<float>(static_cast<uint32_t>(u));
    worst = std::max(worst, ulps(fast_expf(x), exp_rounded(x)));
  }
  return worst;
}

TEST(FastExpf, WithinOneUlpOfTheCorrectlyRoundedExp) {
  constexpr uint32_t kStride = 61;
  // [+0, 89] and [-0, -104]: finite results, subnormal ones included.
  EXPECT_LE(worst_over(0, std::bit_cast<uint32_t>(89.0f) + 1, kStride), 1);
  EXPECT_LE(worst_over(0x80000000u, std::bit_cast<uint32_t>(-104.0f), kStride), 1);
  // Every float near the ends of the range and around 0, where the reduction and scaling change.
  for (const float centre : {88.72f, 88.0f, 0.0f, -87.33f, -103.0f, 0.35f, -0.35f}) {
    const uint32_t c = std::bit_cast<uint32_t>(centre);
    EXPECT_LE(worst_over(c > 4096 ? c - 4096 : 0, c + 4096, 1), 1) << "around " << centre;
  }
}

TEST(FastExpf, EdgesAsExp) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(fast_expf(0.0f), 1.0f);
  EXPECT_EQ(fast_expf(-0.0f), 1.0f);
  EXPECT_EQ(fast_expf(inf), inf);
  EXPECT_EQ(fast_expf(-inf), 0.0f);
  EXPECT_EQ(fast_expf(89.0f), inf);  // e^89 overflows float, as exp's result does
  EXPECT_EQ(fast_expf(1000.0f), inf);
  EXPECT_EQ(fast_expf(-104.0f), 0.0f);
  EXPECT_TRUE(std::isnan(fast_expf(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(fast_expf(88.72283f), exp_rounded(88.72283f));  // the largest finite result
}

// The SwiGLU sigmoid's quotient g / (1 + exp(-g)) of the fast tier (moe.cu) against the correctly rounded
// quotient (in double): the exp's error shrinks through 1 + e and the division keeps it. Where the exact
// tier's float expression gives 0 (exp(-g) overflows for g < -88.7), so does the fast one.
TEST(FastExpf, SiluQuotientWithinTwoUlpOfTheCorrectlyRoundedOne) {
  int64_t worst = 0;
  for (float g = -100.0f; g < 100.0f; g = std::nextafter(g, 200.0f) + 0.0007f) {
    const float fast = g / (1.0f + fast_expf(-g));
    if (g / (1.0f + exp_rounded(-g)) == 0.0f) {
      EXPECT_EQ(fast, 0.0f) << g;
      continue;
    }
    const auto want = static_cast<float>(static_cast<double>(g) / (1.0 + std::exp(-static_cast<double>(g))));
    worst = std::max(worst, ulps(fast, want));
  }
  EXPECT_LE(worst, 2);
}

}  // namespace
}  // namespace dsv4
