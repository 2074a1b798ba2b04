// Block quantization of DeepSeek-V4: the activation quantizers of MODEL.md §2.2-§2.3 and the
// block-scaled weight formats of §9.2 (FP8 128x128 blocks, FP4 1x32 blocks).
#pragma once

#include <cstdint>
#include <span>

namespace dsv4 {

// ---- activation quantizers (one row-block at a time) ------------------------------------------

// FP8 quantization of one block of bf16-valued floats: codes[i] = e4m3(clamp(x[i]/s)), returns
// the UE8M0 byte of s = 2^ceil(log2(max(amax, 1e-4) * fp32(1/448))).
uint8_t quantize_block_e4m3(std::span<const float> x, std::span<uint8_t> codes);

// Q8(x, blk) in place: quantize-dequantize every block of blk elements to the FP8 grid and
// round to bf16 (the reference's act_quant in in-place mode).
void fake_quant_e4m3(std::span<float> x, int blk);

// FP4 quantization of one block (32 elements): codes[i] = e2m1(clamp(x[i]/s)), returns the
// UE8M0 byte of s = 2^ceil(log2(max(amax, 6*2^-126) * fp32(1/6))).
uint8_t quantize_block_e2m1(std::span<const float> x, std::span<uint8_t> codes);

// Q4(x) in place, blocks of 32 (the reference's fp4_act_quant in in-place mode).
void fake_quant_e2m1(std::span<float> x);

// ---- block-scaled weights ---------------------------------------------------------------------

// FP8 e4m3 weight [rows, cols] with one UE8M0 scale per 128x128 block:
// scale[ceil(rows/128), ceil(cols/128)].
struct Fp8BlockWeight {
  const uint8_t* data = nullptr;
  const uint8_t* scale = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;

  int64_t scale_cols() const { return (cols + 127) / 128; }
  float at(int64_t r, int64_t c) const;
  // Dequantizes row r into out[cols].
  void dequant_row(int64_t r, std::span<float> out) const;
};

// FP4 e2m1 weight [rows, cols], packed two per byte along cols (low nibble first), with one
// UE8M0 scale per 1x32 block: scale[rows, cols/32].
struct Fp4BlockWeight {
  const uint8_t* data = nullptr;
  const uint8_t* scale = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;

  float at(int64_t r, int64_t c) const;
  void dequant_row(int64_t r, std::span<float> out) const;
};

// Quantizes a float weight [rows, cols] the way the release does: FP8 per 128x128 block with
// s = 2^ceil(log2(amax/448)). data gets rows*cols bytes, scale ceil(rows/128)*ceil(cols/128).
void quantize_weight_fp8(std::span<const float> w, int64_t rows, int64_t cols, std::span<uint8_t> data,
                         std::span<uint8_t> scale);

// FP4 per 1x32 block with s = 2^ceil(log2(amax/6)); data gets rows*cols/2 packed bytes,
// scale rows*cols/32.
void quantize_weight_fp4(std::span<const float> w, int64_t rows, int64_t cols, std::span<uint8_t> data,
                         std::span<uint8_t> scale);

}  // namespace dsv4
