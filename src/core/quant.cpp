#include "core/quant.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/number_formats.h"

namespace dsv4 {
namespace {

float amax_of(std::span<const float> x) {
  float m = 0.0f;
  for (float v : x) m = std::max(m, std::fabs(v));
  return m;
}

// Power-of-two scale as a float from its UE8M0 byte (always a normal number here).
float scale_value(uint8_t e) { return ue8m0_to_float(e); }

}  // namespace

uint8_t quantize_block_e4m3(std::span<const float> x, std::span<uint8_t> codes) {
  const float amax = std::max(amax_of(x), 1e-4f);
  const uint8_t e = ue8m0_ceil_pow2(amax * (1.0f / kE4M3Max));
  const float s = scale_value(e);
  for (size_t i = 0; i < x.size(); ++i) {
    codes[i] = float_to_e4m3(std::clamp(x[i] / s, -kE4M3Max, kE4M3Max));
  }
  return e;
}

void fake_quant_e4m3(std::span<float> x, int blk) {
  DSV4_CHECK(blk > 0 && x.size() % static_cast<size_t>(blk) == 0,
             "fake_quant_e4m3: {} elements are not a multiple of block {}", x.size(), blk);
  uint8_t codes[512];
  DSV4_CHECK(blk <= 512, "fake_quant_e4m3: block {} too large", blk);
  for (size_t b = 0; b < x.size(); b += static_cast<size_t>(blk)) {
    auto block = x.subspan(b, static_cast<size_t>(blk));
    const float s = scale_value(quantize_block_e4m3(block, codes));
    for (int i = 0; i < blk; ++i) block[static_cast<size_t>(i)] = round_bf16(e4m3_to_float(codes[i]) * s);
  }
}

uint8_t quantize_block_e2m1(std::span<const float> x, std::span<uint8_t> codes) {
  const float amax = std::max(amax_of(x), kE2M1Max * 0x1p-126f);
  const uint8_t e = ue8m0_ceil_pow2(amax * (1.0f / kE2M1Max));
  const float s = scale_value(e);
  for (size_t i = 0; i < x.size(); ++i) {
    codes[i] = float_to_e2m1(std::clamp(x[i] / s, -kE2M1Max, kE2M1Max));
  }
  return e;
}

void fake_quant_e2m1(std::span<float> x) {
  DSV4_CHECK(x.size() % 32 == 0, "fake_quant_e2m1: {} elements are not a multiple of 32", x.size());
  uint8_t codes[32];
  for (size_t b = 0; b < x.size(); b += 32) {
    auto block = x.subspan(b, 32);
    const float s = scale_value(quantize_block_e2m1(block, codes));
    for (size_t i = 0; i < 32; ++i) block[i] = round_bf16(e2m1_to_float(codes[i]) * s);
  }
}

float Fp8BlockWeight::at(int64_t r, int64_t c) const {
  const float s = scale_value(scale[(r / 128) * scale_cols() + c / 128]);
  return e4m3_to_float(data[r * cols + c]) * s;
}

void Fp8BlockWeight::dequant_row(int64_t r, std::span<float> out) const {
  const uint8_t* row = data + r * cols;
  const uint8_t* srow = scale + (r / 128) * scale_cols();
  for (int64_t c = 0; c < cols; ++c) out[static_cast<size_t>(c)] = e4m3_to_float(row[c]) * scale_value(srow[c / 128]);
}

float Fp4BlockWeight::at(int64_t r, int64_t c) const {
  const float s = scale_value(scale[r * (cols / 32) + c / 32]);
  return e2m1_to_float(fp4_at(data + r * (cols / 2), c)) * s;
}

void Fp4BlockWeight::dequant_row(int64_t r, std::span<float> out) const {
  const uint8_t* row = data + r * (cols / 2);
  const uint8_t* srow = scale + r * (cols / 32);
  for (int64_t c = 0; c < cols; ++c)
    out[static_cast<size_t>(c)] = e2m1_to_float(fp4_at(row, c)) * scale_value(srow[c / 32]);
}

void quantize_weight_fp8(std::span<const float> w, int64_t rows, int64_t cols, std::span<uint8_t> data,
                         std::span<uint8_t> scale) {
  const int64_t srows = (rows + 127) / 128, scols = (cols + 127) / 128;
  DSV4_CHECK(static_cast<int64_t>(w.size()) == rows * cols && static_cast<int64_t>(data.size()) == rows * cols &&
                 static_cast<int64_t>(scale.size()) == srows * scols,
             "quantize_weight_fp8: buffer sizes do not match [{}, {}]", rows, cols);
  for (int64_t br = 0; br < srows; ++br) {
    for (int64_t bc = 0; bc < scols; ++bc) {
      const int64_t r1 = std::min(rows, (br + 1) * 128), c1 = std::min(cols, (bc + 1) * 128);
      float amax = 0x1p-100f;
      for (int64_t r = br * 128; r < r1; ++r)
        for (int64_t c = bc * 128; c < c1; ++c) amax = std::max(amax, std::fabs(w[static_cast<size_t>(r * cols + c)]));
      const uint8_t e = ue8m0_ceil_pow2(amax / kE4M3Max);
      const float s = scale_value(e);
      scale[static_cast<size_t>(br * scols + bc)] = e;
      for (int64_t r = br * 128; r < r1; ++r)
        for (int64_t c = bc * 128; c < c1; ++c) {
          const size_t i = static_cast<size_t>(r * cols + c);
          data[i] = float_to_e4m3(std::clamp(w[i] / s, -kE4M3Max, kE4M3Max));
        }
    }
  }
}

void quantize_weight_fp4(std::span<const float> w, int64_t rows, int64_t cols, std::span<uint8_t> data,
                         std::span<uint8_t> scale) {
  DSV4_CHECK(cols % 32 == 0, "quantize_weight_fp4: cols {} not a multiple of 32", cols);
  DSV4_CHECK(static_cast<int64_t>(w.size()) == rows * cols && static_cast<int64_t>(data.size()) == rows * cols / 2 &&
                 static_cast<int64_t>(scale.size()) == rows * cols / 32,
             "quantize_weight_fp4: buffer sizes do not match [{}, {}]", rows, cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < cols / 32; ++b) {
      const float* blk = w.data() + r * cols + b * 32;
      float amax = 0x1p-100f;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(blk[i]));
      const uint8_t e = ue8m0_ceil_pow2(amax / kE2M1Max);
      const float inv = 1.0f / scale_value(e);  // a power of two: x · inv rounds exactly as x / s
      scale[static_cast<size_t>(r * (cols / 32) + b)] = e;
      for (int i = 0; i < 32; i += 2) {
        const uint8_t lo = float_to_e2m1(std::clamp(blk[i] * inv, -kE2M1Max, kE2M1Max));
        const uint8_t hi = float_to_e2m1(std::clamp(blk[i + 1] * inv, -kE2M1Max, kE2M1Max));
        data[static_cast<size_t>(r * (cols / 2) + b * 16 + i / 2)] = static_cast<uint8_t>(lo | (hi << 4));
      }
    }
  }
}

}  // namespace dsv4
