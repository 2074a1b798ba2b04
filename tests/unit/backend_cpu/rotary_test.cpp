#include <gtest/gtest.h>

#include <numbers>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"
#include "op_test_util.h"

namespace dsv4 {
namespace {

using testing::bf;
using testing::random_bf16;

TEST(RopeTable, V4FlashYarnRangeAndFrequencies) {
  const ModelConfig c = v4_flash_config();
  const RopeConfig yarn = rope_config(c, 4);
  const YarnRange r = yarn_range(yarn);
  EXPECT_EQ(r.low, 15);
  EXPECT_EQ(r.high, 25);
  const auto f = rope_frequencies(yarn);
  const auto plain = rope_frequencies({.rope_dim = 64, .theta = 160000});
  ASSERT_EQ(f.size(), 32u);
  for (int i = 0; i < 32; ++i) {
    const double base = std::pow(160000.0, -2.0 * i / 64);
    EXPECT_NEAR(plain[static_cast<size_t>(i)], base, base * 1e-6);
    if (i <= 15) {
      EXPECT_EQ(f[static_cast<size_t>(i)], plain[static_cast<size_t>(i)]) << i;
    }  // fast pairs kept
    if (i >= 25) {
      EXPECT_EQ(f[static_cast<size_t>(i)], plain[static_cast<size_t>(i)] / 16) << i;
    }  // slow pairs / 16
    if (i > 15 && i < 25) {
      const double ramp = (i - 15) / 10.0;
      EXPECT_NEAR(f[static_cast<size_t>(i)], base / 16 * ramp + base * (1 - ramp), base * 1e-6) << i;
    }
  }
  // Ratio-0 layers: rope_theta, no YaRN.
  const RopeConfig win = rope_config(c, 0);
  EXPECT_EQ(win.original_seq_len, 0);
  const auto f0 = rope_frequencies(win);
  for (int i = 0; i < 32; ++i) EXPECT_NEAR(f0[static_cast<size_t>(i)], std::pow(10000.0, -2.0 * i / 64), 1e-6);
}

// Bit-exact against the formulas of §5.3 evaluated here: fp32 angle, fp32 cos/sin, complex product.
TEST(Rope, ForwardAndInverseMatchTheFormulasExactly) {
  std::mt19937 rng(31);
  CpuOps ops(2);
  const int heads = 3, d = 128, rows = 4;
  const RopeConfig cfg = rope_config(v4_flash_config(), 128);
  const std::vector<int32_t> pos = {0, 7, 65535, 1048575};
  const auto f = rope_frequencies(cfg);
  for (bool inverse : {false, true}) {
    auto x = random_bf16(static_cast<size_t>(rows * heads * d), rng);
    auto y = x;
    ops.rope({.x = y.data(),
              .rows = rows,
              .heads = heads,
              .head_dim = d,
              .positions = pos.data(),
              .rope = cfg,
              .inverse = inverse});
    for (int r = 0; r < rows; ++r) {
      for (int h = 0; h < heads; ++h) {
        const size_t base = static_cast<size_t>((r * heads + h) * d);
        for (int i = 0; i < d - 64; ++i) ASSERT_EQ(y[base + i], x[base + i]);  // nope dims untouched
        for (int i = 0; i < 32; ++i) {
          const float angle = static_cast<float>(pos[static_cast<size_t>(r)]) * f[static_cast<size_t>(i)];
          const float c = std::cos(angle), s = inverse ? -std::sin(angle) : std::sin(angle);
          const float re = bf(x[base + 64 + 2 * i]), im = bf(x[base + 64 + 2 * i + 1]);
          ASSERT_EQ(y[base + 64 + 2 * i], float_to_bf16(re * c - im * s));
          ASSERT_EQ(y[base + 64 + 2 * i + 1], float_to_bf16(re * s + im * c));
          // And the rotation is the intended one, in double.
          const double ad = double{static_cast<float>(pos[static_cast<size_t>(r)]) * f[static_cast<size_t>(i)]};
          const double sd = inverse ? -std::sin(ad) : std::sin(ad);
          ASSERT_NEAR(bf(y[base + 64 + 2 * i]), re * std::cos(ad) - im * sd, 0.02 * (std::fabs(re) + std::fabs(im)));
        }
      }
    }
  }
}

TEST(Rope, InverseUndoesForwardUpToBf16Rounding) {
  std::mt19937 rng(32);
  CpuOps ops(1);
  const int d = 512;
  const RopeConfig cfg = rope_config(v4_flash_config(), 0);
  const std::vector<int32_t> pos = {123456};
  const auto x = random_bf16(d, rng);
  auto y = x;
  ops.rope({.x = y.data(), .rows = 1, .heads = 1, .head_dim = d, .positions = pos.data(), .rope = cfg});
  EXPECT_NE(y, x);
  ops.rope(
      {.x = y.data(), .rows = 1, .heads = 1, .head_dim = d, .positions = pos.data(), .rope = cfg, .inverse = true});
  for (int i = 0; i < d; ++i)
    EXPECT_NEAR(bf(y[static_cast<size_t>(i)]), bf(x[static_cast<size_t>(i)]),
                0.02 * (1 + std::fabs(bf(x[static_cast<size_t>(i)]))));
}

TEST(Hadamard, MatchesTheSylvesterMatrixInDouble) {
  std::mt19937 rng(33);
  CpuOps ops(2);
  for (int n : {1, 32, 128, 256}) {
    const int rows = 3;
    const auto x = random_bf16(static_cast<size_t>(rows * n), rng);
    auto y = x;
    ops.hadamard({.x = y.data(), .rows = rows, .dim = n});
    for (int r = 0; r < rows; ++r) {
      for (int i = 0; i < n; ++i) {
        double ref = 0;
        for (int j = 0; j < n; ++j)
          ref += (std::popcount(static_cast<unsigned>(i & j)) % 2 ? -1.0 : 1.0) * bf(x[static_cast<size_t>(r * n + j)]);
        ref /= std::sqrt(double(n));
        ASSERT_NEAR(bf(y[static_cast<size_t>(r * n + i)]), ref, std::fabs(ref) / 128 + 1e-5) << n << " " << i;
      }
    }
  }
}

TEST(Hadamard, OneHotGivesTheRoundedScale) {
  CpuOps ops(1);
  std::vector<uint16_t> x(128, 0);
  x[0] = float_to_bf16(1.0f);
  ops.hadamard({.x = x.data(), .rows = 1, .dim = 128});
  for (uint16_t v : x) EXPECT_EQ(v, float_to_bf16(static_cast<float>(std::pow(128.0, -0.5))));
}

// fp4_after: the rotation, then Q4 of each 32-block, as quant_sim computes it after a plain rotation.
TEST(Hadamard, Fp4AfterIsTheRotationThenQuantSim) {
  CpuOps ops(2);
  std::mt19937 rng(31);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (const int dim : {32, 128, 256}) {
    std::vector<uint16_t> x(static_cast<size_t>(5 * dim));
    for (auto& v : x) v = float_to_bf16(nd(rng));
    auto want = x, got = x;
    ops.hadamard({.x = want.data(), .rows = 5, .dim = dim});
    ops.quant_sim({want.data(), 5, dim, dim, QuantSim::kFp4, 32});
    ops.hadamard({.x = got.data(), .rows = 5, .dim = dim, .fp4_after = true});
    EXPECT_EQ(got, want) << dim;
    auto plain = x;
    ops.hadamard({.x = plain.data(), .rows = 5, .dim = dim});
    EXPECT_NE(plain, want) << "the simulation must change something, or the check above proves nothing";
  }
  std::vector<uint16_t> x(16);
  EXPECT_THROW(ops.hadamard({.x = x.data(), .rows = 1, .dim = 16, .fp4_after = true}), Error);
}

TEST(Rotary, RejectBadParameters) {
  CpuOps ops(1);
  std::vector<uint16_t> x(128);
  std::vector<int32_t> pos(1);
  EXPECT_THROW(ops.hadamard({.x = x.data(), .rows = 1, .dim = 96}), Error);
  EXPECT_THROW(
      ops.rope(
          {.x = x.data(), .rows = 1, .heads = 1, .head_dim = 32, .positions = pos.data(), .rope = {.rope_dim = 64}}),
      Error);
  EXPECT_THROW(ops.rope({.x = x.data(), .rows = 1, .heads = 1, .head_dim = 128, .positions = nullptr}), Error);
  EXPECT_THROW(
      ops.rope(
          {.x = x.data(), .rows = 1, .heads = 1, .head_dim = 128, .positions = pos.data(), .rope = {.rope_dim = 63}}),
      Error);
}

}  // namespace
}  // namespace dsv4
