// The activation quantizers of MODEL.md §2.2-§2.3 and the block-scaled weight formats of §9.2.
#include "core/quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/number_formats.h"

namespace dsv4 {
namespace {

std::vector<float> random_bf16(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = round_bf16(d(rng));
  return v;
}

// The spec's formula written out directly: s = 2^ceil(log2(max(amax, floor) * fp32(1/qmax))).
float spec_scale(const float* x, int n, float floor_amax, float qmax) {
  float amax = 0;
  for (int i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  const float v = std::fmax(amax, floor_amax) * (1.0f / qmax);
  int e;
  const float m = std::frexp(v, &e);  // v = m * 2^e, m in [0.5, 1)
  return m == 0.5f ? std::ldexp(1.0f, e - 1) : std::ldexp(1.0f, e);
}

TEST(Q8, MatchesTheSpecFormulaOnRandomBlocks) {
  for (int blk : {64, 128}) {
    auto x = random_bf16(static_cast<size_t>(blk) * 40, 7 + static_cast<uint32_t>(blk), 3.0f);
    auto y = x;
    fake_quant_e4m3(y, blk);
    for (int b = 0; b < 40; ++b) {
      const float s = spec_scale(&x[static_cast<size_t>(b * blk)], blk, 1e-4f, 448.0f);
      for (int i = 0; i < blk; ++i) {
        const size_t k = static_cast<size_t>(b * blk + i);
        const float want = round_bf16(e4m3_to_float(float_to_e4m3(std::fmin(std::fmax(x[k] / s, -448.f), 448.f))) * s);
        ASSERT_EQ(y[k], want) << "block " << b << " element " << i;
      }
    }
  }
}

TEST(Q8, ScaleUsesTheMultiplyByFp32Reciprocal) {
  // amax = 448: 448 * fp32(1/448) is not exactly 1, which decides between scale 1 and 2.
  const float v = 448.0f * (1.0f / 448.0f);
  std::vector<float> x(128, 1.0f);
  x[3] = 448.0f;
  std::vector<uint8_t> codes(128);
  const uint8_t e = quantize_block_e4m3(x, codes);
  EXPECT_EQ(e, ue8m0_ceil_pow2(v));
  EXPECT_EQ(e4m3_to_float(codes[3]) * ue8m0_to_float(e), 448.0f);
}

TEST(Q8, AllZeroBlockUsesTheAmaxFloor) {
  std::vector<float> x(64, 0.0f);
  std::vector<uint8_t> codes(64);
  EXPECT_EQ(quantize_block_e4m3(x, codes), ue8m0_ceil_pow2(1e-4f * (1.0f / 448.0f)));
  for (auto c : codes) EXPECT_EQ(c, 0);
}

TEST(Q8, IsIdempotentAndSaturatesNothing) {
  auto x = random_bf16(1024, 11, 100.0f);
  fake_quant_e4m3(x, 128);
  auto y = x;
  fake_quant_e4m3(y, 128);
  EXPECT_EQ(x, y);  // values on the grid stay put
}

TEST(Q4, MatchesTheSpecFormulaOnRandomBlocks) {
  auto x = random_bf16(32 * 50, 21, 0.7f);
  auto y = x;
  fake_quant_e2m1(y);
  for (int b = 0; b < 50; ++b) {
    const float s = spec_scale(&x[static_cast<size_t>(b * 32)], 32, 6.0f * 0x1p-126f, 6.0f);
    for (int i = 0; i < 32; ++i) {
      const size_t k = static_cast<size_t>(b * 32 + i);
      ASSERT_EQ(y[k], round_bf16(e2m1_to_float(float_to_e2m1(std::fmin(std::fmax(x[k] / s, -6.f), 6.f))) * s));
    }
  }
}

TEST(Q4, RejectsPartialBlocks) {
  std::vector<float> x(33, 1.0f);
  EXPECT_THROW(fake_quant_e2m1(x), Error);
}

TEST(Fp8BlockWeight, QuantizeThenDequantizeIsWithinHalfAStep) {
  const int64_t rows = 200, cols = 300;  // partial edge blocks on both axes
  auto w = random_bf16(static_cast<size_t>(rows * cols), 3, 0.02f);
  std::vector<uint8_t> data(w.size()), scale(2 * 3);
  quantize_weight_fp8(w, rows, cols, data, scale);
  Fp8BlockWeight view{data.data(), scale.data(), rows, cols};
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; r += 37) {
    view.dequant_row(r, row);
    for (int64_t c = 0; c < cols; ++c) {
      const float s = ue8m0_to_float(scale[static_cast<size_t>((r / 128) * 3 + c / 128)]);
      const float want = e4m3_to_float(float_to_e4m3(w[static_cast<size_t>(r * cols + c)] / s)) * s;
      ASSERT_EQ(row[static_cast<size_t>(c)], want);
      ASSERT_EQ(view.at(r, c), want);
    }
  }
}

TEST(Fp4BlockWeight, QuantizeThenDequantizeMatchesTheGrid) {
  const int64_t rows = 8, cols = 96;
  auto w = random_bf16(static_cast<size_t>(rows * cols), 4, 1.0f);
  std::vector<uint8_t> data(w.size() / 2), scale(w.size() / 32);
  quantize_weight_fp4(w, rows, cols, data, scale);
  Fp4BlockWeight view{data.data(), scale.data(), rows, cols};
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    view.dequant_row(r, row);
    for (int64_t b = 0; b < cols / 32; ++b) {
      float amax = 0;
      for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(w[static_cast<size_t>(r * cols + b * 32 + i)]));
      const float s = ue8m0_to_float(scale[static_cast<size_t>(r * (cols / 32) + b)]);
      EXPECT_GE(s * 6.0f, amax);
      EXPECT_LT(s * 3.0f, amax);  // the smallest power of two that fits
      for (int i = 0; i < 32; ++i) {
        const int64_t c = b * 32 + i;
        const float x = w[static_cast<size_t>(r * cols + c)];
        ASSERT_EQ(row[static_cast<size_t>(c)], e2m1_to_float(float_to_e2m1(x / s)) * s);
      }
    }
  }
}

}  // namespace
}  // namespace dsv4
