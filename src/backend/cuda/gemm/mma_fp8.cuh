// FP8 tensor-core helpers shared by the fast kernels (fast_mma.cu, fast_gemv.cu, wgmma_gemm.cu,
// fp4_widen.cu): mma.sync m16n8k32 on e4m3 operands with fp32 accumulation, and the exact widenings of
// e2m1 codes to e4m3 and, shifted, to e5m2 (the wgmma kernel's per-128 form).
#pragma once

#include <cstdint>

#include "backend/cuda/device_math.cuh"

namespace dsv4::cuda {

// Eight e2m1 codes (nibble i = code i) as eight e4m3 bytes, exactly: the magnitude by table, the
// sign bit moved to bit 7.
__device__ __forceinline__ uint2 e2m1x8_e4m3(uint32_t v) {
  constexpr uint32_t kLo = 0x3c383000u, kHi = 0x4c484440u;              // e4m3 of {0, .5, 1, 1.5} and {2, 3, 4, 6}
  const uint32_t mag = v & 0x77777777u, sign = (v & 0x88888888u) >> 1;  // sign nibble 4 picks 0x80
  uint2 r;
  r.x = __byte_perm(kLo, kHi, mag) | __byte_perm(0u, 0x80808080u, sign);
  r.y = __byte_perm(kLo, kHi, mag >> 16) | __byte_perm(0u, 0x80808080u, sign >> 16);
  return r;
}

// Eight e2m1 codes (nibble i = code i) times 2^shift as eight e5m2 bytes, exactly for shift in
// [-13, 13]: the magnitude at shift 0 by table, 4·shift added to the exponent field of the nonzero
// ones (no byte carries or borrows: the results stay in 0x04..0x7a), the sign moved to bit 7.
__device__ __forceinline__ uint2 e2m1x8_e5m2(uint32_t v, int shift) {
  constexpr uint32_t kLo = 0x3e3c3800u, kHi = 0x46444240u;  // e5m2 of {0, .5, 1, 1.5} and {2, 3, 4, 6}
  const uint32_t step = static_cast<uint32_t>(4 * (shift < 0 ? -shift : shift)) * 0x01010101u;
  const uint32_t mag = v & 0x77777777u, sign = (v & 0x88888888u) >> 1;
  uint32_t out[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint32_t sel = mag >> (16 * h);
    const uint32_t m = __byte_perm(kLo, kHi, sel), delta = step & __byte_perm(0xffffff00u, 0xffffffffu, sel);
    out[h] = (shift < 0 ? m - delta : m + delta) | __byte_perm(0u, 0x80808080u, sign >> (16 * h));
  }
  return {out[0], out[1]};
}

// FP4 per 128 (spec/NUMERICS.md's exact re-encoding): a row's 128-wide block, scale bytes sw (block b in
// byte b), is summed as one e5m2 block against its largest scale byte `top`, with the block's scale
// 2^(top − 127 − 13) (NaN for byte 255) in *scale. Four scales spanning more than 26 octaves cannot be
// re-encoded: reported as kGemmFp4Span (the blocks out of reach flush to zero). Returns top.
__device__ __forceinline__ int fp4_block_top(uint32_t sw, int32_t* err, float* scale) {
  const int e0 = sw & 255u, e1 = (sw >> 8) & 255u, e2 = (sw >> 16) & 255u, e3 = sw >> 24;
  const int top = max(max(e0, e1), max(e2, e3)), low = min(min(e0, e1), min(e2, e3));
  if (top - low > 26 && top != 255) report(err, DeviceError::kGemmFp4Span);
  *scale = top == 255  ? __uint_as_float(0x7fc00000u)
           : top >= 14 ? __uint_as_float(static_cast<uint32_t>(top - 13) << 23)
                       : ldexpf(1.0f, top - 140);
  return top;
}

// Eight codes of scale block `block` of that row block as e5m2 against `top` (zeros out of reach).
__device__ __forceinline__ uint2 e2m1x8_e5m2_shifted(uint32_t codes, uint32_t sw, int block, int top) {
  const int shift = static_cast<int>((sw >> (8 * block)) & 255u) - top + 13;
  return shift >= -13 ? e2m1x8_e5m2(codes, shift) : make_uint2(0, 0);
}

// d = a·b (+ d) on the FP8 tensor cores, fp32 accumulation.
__device__ __forceinline__ void mma_e4m3(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma_e4m3_zero(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %10, %10, %10};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.0f));
}

// mma_e4m3_zero as sm_90a runs it, written out: no FP8 mma.sync exists there, so ptxas widens each
// operand's byte pairs to f16 (exact), multiplies the low pairs (m16n8k16, fp32 accumulation), adds the
// high pairs' products onto them, then adds the zero accumulator in fp32 (four additions a call, which
// change nothing but -0 into +0). Here without those additions; every other step is the same.
__device__ __forceinline__ void e4m3x4_f16x2(uint32_t v, uint32_t& lo, uint32_t& hi) {
  asm("{.reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n cvt.rn.f16x2.e4m3x2 %1, h;\n}\n"
      : "=r"(lo), "=r"(hi)
      : "r"(v));
}
__device__ __forceinline__ void mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma_e4m3_zero_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  uint32_t alo[4], ahi[4], blo[2], bhi[2];
#pragma unroll
  for (int i = 0; i < 4; ++i) e4m3x4_f16x2(a[i], alo[i], ahi[i]);
  e4m3x4_f16x2(b0, blo[0], bhi[0]);
  e4m3x4_f16x2(b1, blo[1], bhi[1]);
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %10, %10, %10};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(alo[0]), "r"(alo[1]), "r"(alo[2]), "r"(alo[3]), "r"(blo[0]), "r"(blo[1]), "f"(0.0f));
  mma_f16(d, ahi, bhi[0], bhi[1]);
}

}  // namespace dsv4::cuda
