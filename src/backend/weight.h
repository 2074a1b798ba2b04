// Weight: a view of one weight matrix [rows = out, cols = in] in any format the reference computes
// with (MODEL.md §9.2-§9.3). Pointers are host memory for the CPU backend, device memory for CUDA.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/quant.h"

namespace dsv4 {

enum class WeightType : uint8_t {
  kFp8Block,  // e4m3 [rows, cols] + ue8m0 scale [ceil(rows/128), ceil(cols/128)]
  kFp4Block,  // e2m1 packed [rows, cols/2] (low nibble first) + ue8m0 scale [rows, cols/32]
  kBf16,      // bf16 [rows, cols]
  kF32,       // fp32 [rows, cols]
};

inline std::string_view weight_type_name(WeightType t) {
  switch (t) {
    case WeightType::kFp8Block:
      return "fp8";
    case WeightType::kFp4Block:
      return "fp4";
    case WeightType::kBf16:
      return "bf16";
    case WeightType::kF32:
      return "f32";
  }
  return "unknown";
}

struct Weight {
  WeightType type = WeightType::kBf16;
  const void* data = nullptr;
  const uint8_t* scale = nullptr;  // FP8/FP4 only
  int64_t rows = 0;
  int64_t cols = 0;  // logical input columns K (for FP4 twice the packed byte columns)
  // Optional, bf16 weights only: the same values stored as FP8 blocks (e4m3 [rows, cols] and ue8m0 scales
  // [rows/128, cols/128], rows and cols multiples of 128), each value bf16(e4m3 · 2^s) as the bf16
  // weight holds it. A backend may read these instead (half the bytes) for the same products, summed in its
  // own order: wo_a, whose checkpoint form is FP8 (MODEL.md §5.7). The CPU backend ignores them.
  const uint8_t* fp8_twin = nullptr;
  const uint8_t* fp8_twin_scale = nullptr;

  static Weight fp8(const Fp8BlockWeight& w) { return {WeightType::kFp8Block, w.data, w.scale, w.rows, w.cols}; }
  static Weight fp4(const Fp4BlockWeight& w) { return {WeightType::kFp4Block, w.data, w.scale, w.rows, w.cols}; }
  static Weight bf16(const uint16_t* data, int64_t rows, int64_t cols) {
    return {WeightType::kBf16, data, nullptr, rows, cols};
  }
  static Weight f32(const float* data, int64_t rows, int64_t cols) {
    return {WeightType::kF32, data, nullptr, rows, cols};
  }
};

}  // namespace dsv4
