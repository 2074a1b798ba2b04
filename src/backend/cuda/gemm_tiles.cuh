// Device helpers shared by the block-scaled GEMM kernels (gemm.cu, gemm_imma.cu): number decoding,
// output stores, and which rows a CTA owns in a dense or grouped (per-expert) launch.
#pragma once

#include <cstdint>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/gemm_internal.h"

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

struct Tile {
  int64_t r0 = 0;  // first row
  int cnt = 0;     // rows in the tile (<= the kernel's row tile)
  int e = 0;       // expert (grouped)
};

// Row tiles of tm rows a launch needs: dense, cdiv(rows, tm); grouped (experts > 0), every expert's
// tiles, at most rows/tm plus one partial tile per non-empty expert, of which there are at most
// min(experts, rows). A decode step's few routed rows then launch a few tiles, not one per expert.
__host__ __forceinline__ int64_t row_tiles(int64_t rows, int64_t tm, int64_t experts) {
  const int64_t partial = experts > 0 ? (experts < rows ? experts : rows) : 0;
  return cdiv(rows + partial * (tm - 1), tm);
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
