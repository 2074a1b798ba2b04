// Loads of plain (fp32 or bf16) weights and bf16 rows as fp32, shared by the plain-weight kernels
// (fast_sgemm.cu, fast_plain_gemv.cu).
#pragma once

#include <cstdint>

#include "backend/cuda/device_math.cuh"

namespace dsv4::cuda {

// Eight bf16 values (the first in u.x's low half) as floats.
__device__ __forceinline__ void bf16x8(uint4 u, float (&v)[8]) {
  bf16x4(make_uint2(u.x, u.y), reinterpret_cast<float(&)[4]>(v[0]));
  bf16x4(make_uint2(u.z, u.w), reinterpret_cast<float(&)[4]>(v[4]));
}

// Eight weight values of a row from fp32 (two 16-byte loads) or bf16 (one).
template <bool kF32>
__device__ __forceinline__ void load_w8(const void* src, float (&v)[8]) {
  if constexpr (kF32) {
    const float4 a = __ldg(static_cast<const float4*>(src)), b = __ldg(static_cast<const float4*>(src) + 1);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
    bf16x8(__ldg(static_cast<const uint4*>(src)), v);
  }
}

}  // namespace dsv4::cuda
