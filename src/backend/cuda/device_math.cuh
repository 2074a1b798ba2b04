// Device helpers shared by the CUDA kernels: bf16 and low-precision number formats with the CPU
// backend's exact rounding (core/number_formats.h, core/quant.h), warp/block reductions with a fixed
// order (bit-reproducible), and entry decoding for DeviceTable.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp4.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "backend/cuda/device_table.h"

namespace dsv4::cuda {

constexpr int kWarp = 32;

__device__ __forceinline__ float bf16_to_f(uint16_t b) { return __bfloat162float(__ushort_as_bfloat16(b)); }
__device__ __forceinline__ uint16_t f_to_bf16(float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }
__device__ __forceinline__ float load_bf16(const uint16_t* p) { return bf16_to_f(*p); }
__device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// UE8M0 exponent byte of the smallest power of two >= v (v positive, normal), and its value.
__device__ __forceinline__ uint8_t ceil_pow2_e8(float v) {
  const uint32_t u = __float_as_uint(v);
  return static_cast<uint8_t>(((u >> 23) & 0xffu) + ((u & 0x7fffffu) != 0u));
}
__device__ __forceinline__ float e8_value(uint8_t e) { return __uint_as_float(static_cast<uint32_t>(e) << 23); }

__device__ __forceinline__ float e4m3_to_f(uint8_t code) {
  __nv_fp8_e4m3 c;
  c.__x = code;
  return static_cast<float>(c);
}
__device__ __forceinline__ uint8_t f_to_e4m3(float v) {  // v already scaled and clamped to ±448
  return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
}
__device__ __forceinline__ float e2m1_to_f(uint8_t nibble) {
  constexpr float kValues[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float v = kValues[nibble & 7];
  return (nibble & 8) ? -v : v;
}

// RoPE of one interleaved pair (re, im) by `angle`, forward or inverse, in fp32 without contraction;
// cos/sin are evaluated in double and rounded to fp32 (the correctly rounded values, which glibc's
// cosf/sinf on the CPU give in all but rare cases). Callers round the results to bf16.
__device__ __forceinline__ void rope_rotate(float& re, float& im, float angle, bool inverse) {
  const float c = static_cast<float>(cos(static_cast<double>(angle)));
  float s = static_cast<float>(sin(static_cast<double>(angle)));
  if (inverse) s = -s;
  const float r = re, i = im;
  re = __fsub_rn(__fmul_rn(r, c), __fmul_rn(i, s));
  im = __fadd_rn(__fmul_rn(r, s), __fmul_rn(i, c));
}

// Element k of an entry in table t (exact decode); d = entry dim, r = rope dim (kAttnFp8).
__device__ __forceinline__ float entry_value(const DeviceTable& t, const uint8_t* e, int k, int d, int r) {
  switch (t.format) {
    case EntryFormat::kBf16:
      return bf16_to_f(reinterpret_cast<const uint16_t*>(e)[k]);
    case EntryFormat::kF32:
      return reinterpret_cast<const float*>(e)[k];
    case EntryFormat::kAttnFp8: {
      const int n = d - r;
      if (k >= n) return bf16_to_f(reinterpret_cast<const uint16_t*>(e + n)[k - n]);
      return e4m3_to_f(e[k]) * e8_value(e[n + 2 * r + k / 64]);
    }
    case EntryFormat::kIndexFp4: {
      const uint8_t byte = e[k / 2];
      return e2m1_to_f((k & 1) ? byte >> 4 : byte & 0xf) * e8_value(e[d / 2 + k / 32]);
    }
    case EntryFormat::kIndexFp8: {
      float s;
      memcpy(&s, e + d, sizeof(float));
      return e4m3_to_f(e[k]) * s;
    }
  }
  return 0.0f;
}

// Records the first device-side index error (see DeviceError); err may be null.
__device__ __forceinline__ void report(int32_t* err, DeviceError code) {
  if (err) atomicCAS(err, 0, static_cast<int32_t>(code));
}

}  // namespace dsv4::cuda
