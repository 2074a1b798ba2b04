// Device helpers shared by the block-scaled GEMM kernels (gemm.cu, gemm_imma.cu, the GEMVs): number decoding,
// output stores, and which rows a CTA owns in a dense or grouped (per-expert) launch.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/gemm/gemm_plan.h"
#include "backend/cuda/gemm_internal.h"
#include "backend/cuda/ptx.cuh"

namespace dsv4::cuda::gemm_tiles {

constexpr unsigned kFull = 0xffffffffu;

__host__ __device__ __forceinline__ int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
__host__ __device__ __forceinline__ int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
__host__ __device__ __forceinline__ int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }

// The CPU's ue8m0_to_float: 2^(e-127), with 0 -> 2^-127 and 255 -> NaN.
__device__ __forceinline__ float ue8m0_f(uint32_t e) {
  return e == 255u ? __uint_as_float(0x7fc00000u) : __uint_as_float(e == 0u ? 0x00400000u : e << 23);
}

__device__ __forceinline__ void store_out(void* y, int64_t y_ld, bool f32, int64_t row, int64_t col, float v) {
  if (f32) {
    static_cast<float*>(y)[row * y_ld + col] = v;
  } else {
    static_cast<uint16_t*>(y)[row * y_ld + col] = f_to_bf16(v);
  }
}

// An integer r = v·2^9 of an e4m3 value v (|r| < 2^18) as three signed base-128 int8 digits
// (r = d0 + 128·d1 + 16384·d2, d0 and d1 in [-64, 63]), into byte i of d[0..2]: the activations of the
// integer block sums (dp4a).
__device__ __forceinline__ void add_digits(int r, int i, uint32_t (&d)[3]) {
#pragma unroll
  for (int p = 0; p < 3; ++p) {
    const int dp = p < 2 ? ((r + 64) & 127) - 64 : r;
    r = (r - dp) >> 7;
    d[p] |= (static_cast<uint32_t>(dp) & 0xffu) << (8 * i);
  }
}

// Four e4m3 codes (byte i of v is element i) to floats; e4m3 -> f16 -> f32 is exact.
__device__ __forceinline__ void e4m3x4(uint32_t v, float* out) {
  const __half2 lo(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(v & 0xffffu), __NV_E4M3));
  const __half2 hi(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(v >> 16), __NV_E4M3));
  const float2 a = __half22float2(lo), b = __half22float2(hi);
  out[0] = a.x;
  out[1] = a.y;
  out[2] = b.x;
  out[3] = b.y;
}

// The fp64 block sums (the skinny kernel, the FP8 GEMV) run in a scaled range, so that weights decode with integer
// instructions alone (no conversions): activations are staged as a·2^1000, and a weight code's
// magnitude bits shifted to the bottom of the fp64 exponent field are exactly w·2^-1016 (e4m3) or
// w·2^-1022 (e2m1), subnormal for the formats' own subnormals (fp64 keeps denormals, and products of
// them are normal). A block's products are then exact multiples of 2^-34 (FP8) or 2^-32 (FP4), the
// sum is exact, and rounding it to fp32 commutes with the power-of-two rescaling.
constexpr double kSkActScale = 0x1p1000;
constexpr float kSkFp8Unscale = 0x1p16f, kSkFp4Unscale = 0x1p22f;

// Four e4m3 codes (byte i of v) as fp64 w·2^-1016: the high word is the magnitude << 17 (from byte i
// of v << 1) with the sign on top (byte i of v, sign-replicated, masked). The NaN codes (0x7f, 0xff)
// would come out finite: any byte holding one sets bit 7 of that byte in `nan`.
__device__ __forceinline__ void e4m3x4_scaled(uint32_t v, double* out, uint32_t& nan) {
  nan |= ((v & 0x7f7f7f7fu) + 0x01010101u) & 0x80808080u;
  const uint32_t v1 = v << 1;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t hi = prmt(v1, v, (i << 8) | ((12u + i) << 12)) & 0x80fe0000u;
    out[i] = __hiloint2double(static_cast<int>(hi), 0);
  }
}

// Four activation values times kSkActScale (exact) at a 16-byte aligned double array.
__device__ __forceinline__ void put4(double* dst, const float (&v)[4]) {
  double d[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) d[i] = __dmul_rn(v[i], kSkActScale);
  reinterpret_cast<double2*>(dst)[0] = make_double2(d[0], d[1]);
  reinterpret_cast<double2*>(dst)[1] = make_double2(d[2], d[3]);
}

// Eight e2m1 nibbles (nibble i = element i) -> int8 of value·2 in [-12, 12], bytes in element order.
__device__ __forceinline__ uint2 e2m1x8_int8(uint32_t v) {
  constexpr uint32_t kPosLo = 0x03020100u, kPosHi = 0x0c080604u;        // 2·{0, .5, 1, 1.5, 2, 3, 4, 6}
  constexpr uint32_t kNegLo = 0xfdfeff00u, kNegHi = 0xf4f8fafcu;        // their negations
  const uint32_t mag = v & 0x77777777u, sign = (v & 0x88888888u) >> 1;  // sign: selector 4 -> 0xff
  uint2 r;
  const uint32_t m0 = __byte_perm(0u, 0xffffffffu, sign), m1 = __byte_perm(0u, 0xffffffffu, sign >> 16);
  r.x = (__byte_perm(kPosLo, kPosHi, mag) & ~m0) | (__byte_perm(kNegLo, kNegHi, mag) & m0);
  r.y = (__byte_perm(kPosLo, kPosHi, mag >> 16) & ~m1) | (__byte_perm(kNegLo, kNegHi, mag >> 16) & m1);
  return r;
}

// d += a·b on the int8 tensor cores (m16n8k32: a the 16x32 row operand, b the 32x8 column operand).
__device__ __forceinline__ void mma_s8(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// d = a·b on the int8 tensor cores, from a zero accumulator.
__device__ __forceinline__ void mma_s8_zero(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %10, %10, %10};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0));
}

// Whether any of the four e4m3 codes in w is a NaN (low seven bits all set).
__device__ __forceinline__ bool any_nan4(uint32_t w) { return (((w & 0x7f7f7f7fu) + 0x01010101u) & 0x80808080u) != 0; }

struct Tile {
  int64_t r0 = 0;  // first row
  int cnt = 0;     // rows in the tile (<= the kernel's row tile)
  int e = 0;       // expert (grouped)
};

// The expert whose rows [start[e], start[e + 1]) hold `row` (start ascending, start[0] <= row <
// start[experts]): the last e with start[e] <= row.
__device__ __forceinline__ int expert_of_row(const int32_t* start, int experts, int64_t row) {
  int lo = 0, hi = experts;  // start[lo] <= row < start[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (start[mid] <= row) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// Tile `tile` in the list of every expert's row tiles (whole warp; tile is warp-uniform).
__device__ __forceinline__ bool find_expert_tile(const int32_t* off, int experts, int tm, int64_t tile, Tile& t) {
  const int lane = threadIdx.x % kWarp;
  int64_t before = 0;
  for (int e0 = 0; e0 < experts; e0 += kWarp) {
    const int e = e0 + lane;
    int lo = 0, cnt = 0;
    if (e < experts) {
      lo = off[e];
      cnt = max(off[e + 1] - lo, 0);
    }
    const int tiles = (cnt + tm - 1) / tm;
    int inc = tiles;
    for (int o = 1; o < kWarp; o <<= 1) {
      const int v = __shfl_up_sync(kFull, inc, o);
      if (lane >= o) inc += v;
    }
    const int total = __shfl_sync(kFull, inc, kWarp - 1);
    if (tile < before + total) {
      const int src = __ffs(__ballot_sync(kFull, tile < before + inc)) - 1;
      const int64_t first = before + __shfl_sync(kFull, inc - tiles, src);
      const int lo_s = __shfl_sync(kFull, lo, src), cnt_s = __shfl_sync(kFull, cnt, src);
      const int64_t j = tile - first;
      t.r0 = lo_s + j * tm;
      t.cnt = static_cast<int>(imin(tm, cnt_s - j * tm));
      t.e = e0 + src;
      return true;
    }
    before += total;
  }
  return false;
}

// Row tile blockIdx.x of a dense or grouped launch; false when the CTA has no work.
__device__ __forceinline__ bool row_tile(const ExactBlockArgs& p, int tm, Tile& t) {
  if (p.offsets) return find_expert_tile(p.offsets, p.experts, tm, blockIdx.x, t);
  t.r0 = int64_t{blockIdx.x} * tm;
  t.cnt = static_cast<int>(imin(tm, p.rows - t.r0));
  t.e = 0;
  return t.cnt > 0;
}

}  // namespace dsv4::cuda::gemm_tiles
