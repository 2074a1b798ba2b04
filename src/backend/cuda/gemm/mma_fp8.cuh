// FP8 mma.sync helpers shared by the few-row and mma.sync kernels (fast_gemv.cu, fast_mma.cu): m16n8k32
// on e4m3 operands with fp32 accumulation, and the same written out as sm_90a runs it. FP4 codes reach
// them decoded by gemm/fp4_shift.h.
#pragma once

#include <cstdint>

#include "backend/cuda/device_math.cuh"

namespace dsv4::cuda {

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
