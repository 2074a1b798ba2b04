#include <gtest/gtest.h>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"
#include "op_test_util.h"

namespace dsv4 {
namespace {

using testing::bf;
using testing::random_bf16;

TEST(RmsNorm, MatchesDoubleReferenceWithinOneBf16Rounding) {
  std::mt19937 rng(21);
  CpuOps ops(2);
  for (int64_t dim : {256L, 4096L, 7168L}) {
    const int64_t rows = 3;
    const auto x = random_bf16(static_cast<size_t>(rows * dim), rng, 2.0f);
    auto w = random_bf16(static_cast<size_t>(dim), rng, 0.1f);
    for (auto& v : w) v = float_to_bf16(1.0f + bf(v));
    std::vector<uint16_t> y(x.size());
    ops.rms_norm({.x = x.data(), .y = y.data(), .weight = w.data(), .rows = rows, .dim = dim, .eps = 1e-6f});
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < dim; ++i)
        ss += double{bf(x[static_cast<size_t>(r * dim + i)])} * bf(x[static_cast<size_t>(r * dim + i)]);
      const double rs = 1.0 / std::sqrt(ss / dim + 1e-6);
      for (int64_t i = 0; i < dim; ++i) {
        const size_t k = static_cast<size_t>(r * dim + i);
        const double ref = bf(w[static_cast<size_t>(i)]) * (bf(x[k]) * rs);
        ASSERT_NEAR(bf(y[k]), ref, std::fabs(ref) * (1.0 / 256) + 1e-30) << dim << " " << i;
      }
    }
    // In place gives the same bits.
    auto z = x;
    ops.rms_norm({.x = z.data(), .y = z.data(), .weight = w.data(), .rows = rows, .dim = dim, .eps = 1e-6f});
    EXPECT_EQ(z, y);
  }
}

// Values from {±0.5, ±1, ±1.5, ±2} have squares whose sums are exact in any order, so the bf16
// steps of §5.2 can be checked bit for bit.
TEST(HeadRmsNorm, FollowsTheBf16StepsExactly) {
  std::mt19937 rng(22);
  CpuOps ops(2);
  const int heads = 3, d = 512;
  const int64_t rows = 2;
  std::uniform_int_distribution<int> pick(0, 7);
  const float values[8] = {0.5f, 1.0f, 1.5f, 2.0f, -0.5f, -1.0f, -1.5f, -2.0f};
  std::vector<uint16_t> q(static_cast<size_t>(rows * heads * d));
  for (auto& v : q) v = float_to_bf16(values[pick(rng)]);
  auto out = q;
  ops.head_rms_norm({.x = out.data(), .rows = rows, .heads = heads, .head_dim = d, .eps = 1e-6f});
  for (int64_t h = 0; h < rows * heads; ++h) {
    float sum = 0;
    for (int i = 0; i < d; ++i) {
      const float v = bf(q[static_cast<size_t>(h * d + i)]);
      sum += round_bf16(v * v);
    }
    const float mean = round_bf16(sum / d);
    const float r = round_bf16(1.0f / std::sqrt(round_bf16(mean + 1e-6f)));
    for (int i = 0; i < d; ++i) {
      const size_t k = static_cast<size_t>(h * d + i);
      ASSERT_EQ(out[k], float_to_bf16(bf(q[k]) * r)) << h << " " << i;
    }
  }
}

TEST(HeadRmsNorm, RandomHeadsHaveUnitRms) {
  std::mt19937 rng(23);
  CpuOps ops(1);
  const int heads = 64, d = 512;
  auto q = random_bf16(static_cast<size_t>(heads * d), rng, 5.0f);
  ops.head_rms_norm({.x = q.data(), .rows = 1, .heads = heads, .head_dim = d, .eps = 1e-6f});
  for (int h = 0; h < heads; ++h) {
    double ss = 0;
    for (int i = 0; i < d; ++i)
      ss += double{bf(q[static_cast<size_t>(h * d + i)])} * bf(q[static_cast<size_t>(h * d + i)]);
    EXPECT_NEAR(std::sqrt(ss / d), 1.0, 0.02);
  }
}

TEST(Norms, RejectBadParameters) {
  CpuOps ops(1);
  std::vector<uint16_t> x(8), w(8);
  EXPECT_THROW(ops.rms_norm({.x = x.data(), .y = x.data(), .weight = nullptr, .rows = 1, .dim = 8}), Error);
  EXPECT_THROW(ops.rms_norm({.x = x.data(), .y = x.data(), .weight = w.data(), .rows = 1, .dim = 0}), Error);
  EXPECT_THROW(ops.rms_norm({.x = x.data(), .y = x.data(), .weight = w.data(), .rows = 1, .dim = 8, .eps = -1}), Error);
  EXPECT_THROW(ops.head_rms_norm({.x = x.data(), .rows = 1, .heads = 0, .head_dim = 8}), Error);
  EXPECT_THROW(ops.head_rms_norm({.x = nullptr, .rows = 1, .heads = 1, .head_dim = 8}), Error);
}

}  // namespace
}  // namespace dsv4
