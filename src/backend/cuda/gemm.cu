// The exact GEMM kernels (bit-identical to backend/cpu/linear.cpp), the activation quantizer of the
// block-scaled GEMMs and the grouped expert GEMM. See gemm.h for the arithmetic.
//
// Three kernels, chosen by shape (pick_tiled), where the int8 tensor-core kernel (gemm_imma.cu,
// exact_block_gemm's first choice from 64 rows per weight on activation codes) does not run:
//  * skinny_block: FP8/FP4 with few rows per weight (decode). A CTA owns 32 output columns (one per
//    lane) and TM <= 8 rows; its 8 warps take 8 consecutive 128-wide K-blocks at a time, each lane
//    computing the block sums of its column for all TM rows (weights read once per row tile,
//    16-byte loads, decoded in registers; activations quantized (or decoded from codes) once into
//    shared memory as doubles and read as broadcasts). One- and two-row tiles copy the next stage's
//    weights as whole rows into shared memory (cp.async, the stage ring below) instead of loading
//    them lane by lane. The scaled block contributions go to shared memory and are added
//    in block order. When that makes too few CTAs (decode on a narrow weight), each CTA takes one 8-block K stage and
//    stores its contributions; the last CTA of a tile adds them all in block order (split-K).
//  * skinny_plain: bf16/f32 weights with few rows. Plain weights have one sequential sum over all
//    of K, so only outputs run in parallel: a CTA owns 32 columns x TM <= 4 rows; a producer warp
//    streams the weight rows through a cp.async ring and a consumer warp only runs the sums (their
//    latency, K dependent FMAs, is the floor).
//  * tiled: many rows (prefill, all kinds). 64x64 CTA tiles, 4x4 register micro-tiles, 32-wide K
//    stages decoded in shared memory (fp64 for FP8/FP4, fp32 for plain weights; double-buffered, one
//    register-prefetched stage); every thread walks K in order, so the block order of the sums is
//    the natural loop order. From bf16 input the tile finds its rows' scales at each K-block's start
//    and quantizes as it stores.
// FP8/FP4 block sums are exact: e4m3 x e4m3 and e2m1 x e4m3 products are multiples of 2^-18 below
// 2^18 in magnitude, so a 128-block of them sums exactly in fp64 (DFMA on exactly decoded values) in
// any order, and __double2float_rn rounds the sum once, as the CPU does. Products of bf16 values are
// exact in fp32, so an FMA in the plain chains rounds exactly like the CPU's separate multiply and add
// (barring products below ~2^-120); f32 weights use __fmul_rn/__fadd_rn. Every scaling and block
// combination uses explicit _rn intrinsics (nvcc would otherwise contract them into FMAs). Sums never
// use atomics (split-K counts arrivals with one), so results are reproducible run to run.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdlib>
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/fp4_gemv.h"
#include "backend/cuda/fp8_gemv.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/gemm_imma.h"
#include "backend/cuda/gemm_imma_skinny.h"
#include "backend/cuda/gemm_internal.h"
#include "backend/cuda/gemm_tiles.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/ptx.cuh"

namespace dsv4::cuda {
namespace {

using namespace gemm_tiles;

// ---- number decoding -----------------------------------------------------------------------------

// Eight e2m1 nibbles (nibble i of v is element i). The magnitude bits shifted into an fp32 pattern
// are exactly value * 2^-126 (a subnormal for 0.5), rescaled exactly: needs denormals (no -ftz).
__device__ __forceinline__ void e2m1x8(uint32_t v, float* out) {
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint32_t t = v >> (4 * i);
    out[i] = __uint_as_float(((t & 7u) << 22) | ((t & 8u) << 28)) * 0x1p126f;
  }
}

// Eight e2m1 nibbles (nibble i of v) as fp64 w·2^-1022: the high word is the magnitude << 19 with the
// sign on top. Byte j's high nibble: its magnitude from byte j of v >> 1, its sign from byte j of v;
// the low nibble: from byte j of v << 3 and of v << 4.
__device__ __forceinline__ void e2m1x8_scaled(uint32_t v, double* out) {
  const uint32_t r1 = v >> 1, l3 = v << 3, l4 = v << 4;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t lo = prmt(l3, l4, (j << 8) | ((12u + j) << 12)) & 0x80380000u;
    const uint32_t hi = prmt(r1, v, (j << 8) | ((12u + j) << 12)) & 0x80380000u;
    out[2 * j] = __hiloint2double(static_cast<int>(lo), 0);
    out[2 * j + 1] = __hiloint2double(static_cast<int>(hi), 0);
  }
}

__device__ __forceinline__ void bf16x8(uint4 v, float* out) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = __uint_as_float(w[i] << 16);
    out[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

// ---- quantize_act ----------------------------------------------------------------------------------

// One warp per (row, 128-block), 4 elements a lane: quant.cu's quantize_e4m3 with fp32 scales.
// Threads past the activation warps convert the weight's ue8m0 scales (ws) in the same launch.
__global__ void __launch_bounds__(256)
    quantize_act_kernel(const uint16_t* __restrict__ x, int64_t rows, int64_t k, int64_t x_ld,
                        uint8_t* __restrict__ codes, float* __restrict__ scales, int64_t scale_ld, WeightScaleJob ws) {
  pdl_enter();
  const int64_t nblk = k / 128;
  const int64_t thread = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const int64_t warp = thread / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (warp >= rows * nblk) {
    const int64_t i = thread - rows * nblk * kWarp, kb = (ws.k + 127) / 128, ld = (kb + 3) / 4 * 4;  // weight_scale_ld
    if (ws.scale && i < (ws.n + 127) / 128 * ld)
      ws.out[i] = i % ld < kb ? ue8m0_f(ws.scale[i / ld * kb + i % ld]) : 0.0f;
    return;
  }
  const int64_t row = warp / nblk, kb = warp % nblk;
  float v[4];
  bf16x4_at(x + row * x_ld + kb * 128 + lane * 4, v);
  uint32_t packed = 0;
  const float s = quantize_lane4(v, packed);
  *reinterpret_cast<uint32_t*>(codes + row * k + kb * 128 + lane * 4) = packed;
  if (lane == 0) scales[kb * scale_ld + row] = s;
}

// ---- skinny block-scaled kernel ------------------------------------------------------------------

constexpr int kSkWarps = 8;  // K-blocks per stage, one per warp
constexpr int kSkThreads = kSkWarps * kWarp;
constexpr int kSkCols = 32;  // output columns per CTA, one per lane
constexpr int kSkStageK = kSkWarps * 128;

template <int TM, int NSUB>
struct SkinnySmem {
  static constexpr int kTM = TM;
  double a[TM][kSkStageK];  // activation values of the stage times kSkActScale
  float sa[TM][kSkWarps];   // their block scales
  float contrib[kSkWarps][NSUB][TM][kSkCols];
};

// One lane's weight data for one 128-wide K-block of its column.
template <GemmWeightKind KIND>
struct WeightBlock;

template <>
struct WeightBlock<GemmWeightKind::kFp8> {
  static constexpr int kChunks = 8;  // 16-byte chunks
  using Scale = float;
  uint4 raw[kChunks];
  Scale sb;
  __device__ static const uint4* chunks(const void* w, int64_t n, int b, int64_t kg) {
    return reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(w) + n * kg + b * 128);
  }
  __device__ static Scale scale(const uint8_t* ws, int64_t n, int b, int64_t kg) {
    return ue8m0_f(__ldg(ws + (n / 128) * (kg / 128) + b));
  }
};

template <>
struct WeightBlock<GemmWeightKind::kFp4> {
  static constexpr int kChunks = 4;
  using Scale = uint32_t;  // the four 32-element sub-blocks' ue8m0 bytes, first in the low byte
  uint4 raw[kChunks];
  Scale sb;
  __device__ static const uint4* chunks(const void* w, int64_t n, int b, int64_t kg) {
    return reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(w) + n * (kg / 2) + b * 64);
  }
  __device__ static Scale scale(const uint8_t* ws, int64_t n, int b, int64_t kg) {
    const uint8_t* src = ws + n * (kg / 32) + b * 4;  // byte loads: scale tensors need no alignment
    Scale v = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) v |= static_cast<Scale>(__ldg(src + i)) << (8 * i);
    return v;
  }
  __device__ __forceinline__ float sub_scale(int q) const { return ue8m0_f(static_cast<uint8_t>(sb >> (8 * q))); }
};

template <GemmWeightKind KIND>
__device__ __forceinline__ void load_block(WeightBlock<KIND>& wb, const void* w, const uint8_t* ws, int64_t n, int b,
                                           int64_t kg) {
  const uint4* src = WeightBlock<KIND>::chunks(w, n, b, kg);
#pragma unroll
  for (int i = 0; i < WeightBlock<KIND>::kChunks; ++i) wb.raw[i] = __ldg(src + i);
  wb.sb = WeightBlock<KIND>::scale(ws, n, b, kg);
}

// Independent fp64 chains per row of the skinny block sums (fewer rows, more chains: the sums are
// exact, so splitting them changes nothing but the DFMA latency exposed).
template <int TM>
constexpr int kSkChains = TM >= 4 ? 1 : 4 / TM;

// P[m][c] += a[m][k0 + i] * w[i] for i in [0, W), i in chain c = i/2 mod C (a read as shared-memory
// broadcasts): exact products, exact sums.
template <int TM, int W, int C = kSkChains<TM>>
__device__ __forceinline__ void accumulate(const double (*a)[kSkStageK], int k0, const double (&w)[W],
                                           double (&P)[TM][C]) {
#pragma unroll
  for (int m = 0; m < TM; ++m) {
#pragma unroll
    for (int i = 0; i < W; i += 2) {
      const double2 av = *reinterpret_cast<const double2*>(&a[m][k0 + i]);
      double& p = P[m][(i / 2) % C];
      p = __fma_rn(av.x, w[i], p);
      p = __fma_rn(av.y, w[i + 1], p);
    }
  }
}

template <int TM, int C>
__device__ __forceinline__ void zero_sums(double (&P)[TM][C]) {
#pragma unroll
  for (int m = 0; m < TM; ++m) {
#pragma unroll
    for (int c = 0; c < C; ++c) P[m][c] = 0.0;
  }
}

// The block sum of row m (exact, scaled) rounded once to fp32 and unscaled.
template <int TM, int C>
__device__ __forceinline__ float block_sum(const double (&P)[TM][C], int m, float unscale) {
  double v = P[m][0];
#pragma unroll
  for (int c = 1; c < C; ++c) v = __dadd_rn(v, P[m][c]);
  return __fmul_rn(__double2float_rn(v), unscale);
}

// FP8: P over the 128-block, contribution P * (sa * sb).
template <int TM>
__device__ __forceinline__ void block_products(SkinnySmem<TM, 1>& s, const WeightBlock<GemmWeightKind::kFp8>& wb,
                                               int warp, int lane) {
  double P[TM][kSkChains<TM>];
  zero_sums(P);
  uint32_t nan = 0;
#pragma unroll
  for (int ch = 0; ch < 8; ++ch) {
    double w[16];
    e4m3x4_scaled(wb.raw[ch].x, w, nan);
    e4m3x4_scaled(wb.raw[ch].y, w + 4, nan);
    e4m3x4_scaled(wb.raw[ch].z, w + 8, nan);
    e4m3x4_scaled(wb.raw[ch].w, w + 12, nan);
    accumulate<TM, 16>(s.a, warp * 128 + ch * 16, w, P);
  }
#pragma unroll
  for (int m = 0; m < TM; ++m) {
    const float b = nan ? __int_as_float(0x7fffffff) : block_sum(P, m, kSkFp8Unscale);
    s.contrib[warp][0][m][lane] = __fmul_rn(b, __fmul_rn(s.sa[m][warp], wb.sb));
  }
}

// FP4: per 32-block P, contribution (P * sa) * sb.
template <int TM>
__device__ __forceinline__ void block_products(SkinnySmem<TM, 4>& s, const WeightBlock<GemmWeightKind::kFp4>& wb,
                                               int warp, int lane) {
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    double P[TM][kSkChains<TM>];
    zero_sums(P);
    const uint32_t words[4] = {wb.raw[q].x, wb.raw[q].y, wb.raw[q].z, wb.raw[q].w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      double w[8];
      e2m1x8_scaled(words[i], w);
      accumulate<TM, 8>(s.a, warp * 128 + q * 32 + i * 8, w, P);
    }
    const float sb = wb.sub_scale(q);
#pragma unroll
    for (int m = 0; m < TM; ++m) {
      s.contrib[warp][q][m][lane] = __fmul_rn(__fmul_rn(block_sum(P, m, kSkFp4Unscale), s.sa[m][warp]), sb);
    }
  }
}

// A warp's 128-block of values, four a lane, quantized to e4m3 and decoded in place (exact floats);
// returns the block's scale.
__device__ __forceinline__ float quantize_decode4(float (&v)[4]) {
  uint32_t packed = 0;
  const float sa = quantize_lane4(v, packed);
  e4m3x4(packed, v);
  return sa;
}

// A lane's four values of row m in K-block kb quantized to e4m3 and decoded (exact floats), zeros
// where !live (warp-uniform); returns the block's scale (0 where !live).
__device__ __forceinline__ float quantized_lane4(const uint16_t* x, int64_t x_ld, const Tile& t, int m, int kb,
                                                 bool live, int lane, float (&v)[4]) {
  v[0] = v[1] = v[2] = v[3] = 0.0f;
  if (!live) return 0.0f;
  bf16x4(x + (t.r0 + m) * x_ld + int64_t{kb} * 128 + lane * 4, v);
  return quantize_decode4(v);
}

// A lane's four activation codes of row m in K-block kb decoded, zeros where !live; returns the
// block's scale (0 where !live).
__device__ __forceinline__ float code_lane4(const uint8_t* codes, int64_t codes_ld, const float* scales,
                                            int64_t scale_ld, const Tile& t, int m, int kb, bool live, int lane,
                                            float (&v)[4]) {
  v[0] = v[1] = v[2] = v[3] = 0.0f;
  if (!live) return 0.0f;
  e4m3x4(__ldg(reinterpret_cast<const uint32_t*>(codes + (t.r0 + m) * codes_ld + int64_t{kb} * 128 + lane * 4)), v);
  return __ldg(scales + kb * scale_ld + t.r0 + m);
}

// A lane's four decoded activation values of row m in K-block j into the stage, the block's scale
// from lane 0 (the integer sums' overload is below).
template <int TM, int NSUB>
__device__ __forceinline__ void store_lane4(SkinnySmem<TM, NSUB>& s, int m, int j, int lane, const float (&v)[4],
                                            float sa) {
  put4(&s.a[m][j * 128 + lane * 4], v);
  if (lane == 0) s.sa[m][j] = sa;
}

// One warp per (row, K-block) of the stage, four values a lane: load(m, kb, live, lane, v) fills v
// (zeros where !live, warp-uniform) and returns the block's scale.
template <typename Smem, typename Load>
__device__ __forceinline__ void stage_rows(Smem& s, const Tile& t, int kb0, int nb, Load load) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  for (int i = warp; i < Smem::kTM * kSkWarps; i += kSkWarps) {
    const int m = i / kSkWarps, j = i % kSkWarps;
    float v[4];
    const float sa = load(m, kb0 + j, m < t.cnt && j < nb, lane, v);
    store_lane4(s, m, j, lane, v, sa);
  }
}

// Decodes the tile's activation codes of K-blocks [kb0, kb0 + nb) into the stage (zeros past the
// tile's rows and the blocks), with their scales.
template <typename Smem>
__device__ __forceinline__ void stage_acts(Smem& s, const uint8_t* codes, int64_t codes_ld, const float* scales,
                                           int64_t scale_ld, const Tile& t, int kb0, int nb) {
  stage_rows(s, t, kb0, nb, [&](int m, int kb, bool live, int lane, float(&v)[4]) {
    return code_lane4(codes, codes_ld, scales, scale_ld, t, m, kb, live, lane, v);
  });
}

// The same from bf16 rows, quantized here (the reference's activation quantization, fused where
// the GEMM reads its input).
template <typename Smem>
__device__ __forceinline__ void stage_acts_bf16(Smem& s, const uint16_t* x, int64_t x_ld, const Tile& t, int kb0,
                                                int nb) {
  stage_rows(s, t, kb0, nb, [&](int m, int kb, bool live, int lane, float(&v)[4]) {
    return quantized_lane4(x, x_ld, t, m, kb, live, lane, v);
  });
}

// ---- integer block sums for FP4 (tiles of two or more rows; gemm.h Fp4Sums) ----------------------
//
// An e4m3 value times 2^9 and an e2m1 value times 2 are integers (below 2^18 and 12 in magnitude), so
// a 32-product block sum times 2^10 is an integer below 2^27: exact in int32, and its conversion to
// fp32 is the reference's one rounding. The activations are staged as three signed base-128 int8
// digits (v·2^9 = d0 + 128·d1 + 16384·d2, each in [-64, 63]) and the weights become int8 bytes through
// a 256-entry table (one code byte -> two values), so that dp4a sums four products an instruction.
// NaN activation codes have no integer: the block they sit in is flagged and gives NaN, as the fp64
// sums do.
constexpr float kSkFp4IntUnscale = 0x1p-10f;

template <int TM>
struct SkinnyIntSmem {
  static constexpr int kTM = TM;
  int8_t dig[3][TM][kSkStageK];  // the stage's activation digits
  float sa[TM][kSkWarps];        // their block scales
  uint8_t nan[TM][kSkWarps];     // a NaN code in the row's K-block
  uint16_t table[256];           // code byte -> the two e2m1 values times 2 as int8 (low nibble first)
  float contrib[kSkWarps][4][TM][kSkCols];
};

// The int8 of an e2m1 code times 2.
__device__ __forceinline__ int e2m1_times2(uint32_t code) {
  constexpr int kMag[8] = {0, 1, 2, 3, 4, 6, 8, 12};
  const int m = kMag[code & 7u];
  return code & 8u ? -m : m;
}

template <int TM>
__device__ __forceinline__ void fill_table(SkinnyIntSmem<TM>& s) {
  for (int b = threadIdx.x; b < 256; b += kSkThreads) {
    const auto lo = static_cast<uint8_t>(e2m1_times2(b & 15u)), hi = static_cast<uint8_t>(e2m1_times2(b >> 4));
    s.table[b] = static_cast<uint16_t>(lo | (hi << 8));
  }
}

// Four e4m3 values (exact floats) as digits at k.. of row m; true if one is NaN.
template <int TM>
__device__ __forceinline__ bool put_digits(SkinnyIntSmem<TM>& s, int m, int k, const float (&v)[4]) {
  uint32_t d[3] = {0, 0, 0};
  bool nan = false;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    nan |= v[i] != v[i];
    add_digits(nan ? 0 : __float2int_rn(__fmul_rn(v[i], 512.0f)), i, d);
  }
#pragma unroll
  for (int p = 0; p < 3; ++p) *reinterpret_cast<uint32_t*>(&s.dig[p][m][k]) = d[p];
  return nan;
}

// The integer sums' stage: digits instead of fp64 values, and NaN flags.
template <int TM>
__device__ __forceinline__ void store_lane4(SkinnyIntSmem<TM>& s, int m, int j, int lane, const float (&v)[4],
                                            float sa) {
  const bool nan = __any_sync(0xffffffffu, put_digits(s, m, j * 128 + lane * 4, v));
  if (lane == 0) {
    s.nan[m][j] = nan;
    s.sa[m][j] = sa;
  }
}

// FP4 with integer block sums: per 32-block S = Σ d0·w + 128·Σ d1·w + 16384·Σ d2·w, contribution
// (fp32(S)·2^-10 · sa) · sb.
template <int TM>
__device__ __forceinline__ void block_products(SkinnyIntSmem<TM>& s, const WeightBlock<GemmWeightKind::kFp4>& wb,
                                               int warp, int lane) {
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    int acc[TM][3];
#pragma unroll
    for (int m = 0; m < TM; ++m) acc[m][0] = acc[m][1] = acc[m][2] = 0;
    const uint32_t words[4] = {wb.raw[q].x, wb.raw[q].y, wb.raw[q].z, wb.raw[q].w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t w = words[i];
      const uint32_t lo = s.table[w & 0xffu] | (static_cast<uint32_t>(s.table[(w >> 8) & 0xffu]) << 16);
      const uint32_t hi = s.table[(w >> 16) & 0xffu] | (static_cast<uint32_t>(s.table[w >> 24]) << 16);
      const int k = warp * 128 + q * 32 + i * 8;
#pragma unroll
      for (int m = 0; m < TM; ++m) {
#pragma unroll
        for (int p = 0; p < 3; ++p) {
          const uint2 d = *reinterpret_cast<const uint2*>(&s.dig[p][m][k]);
          acc[m][p] = __dp4a(static_cast<int>(d.x), static_cast<int>(lo), acc[m][p]);
          acc[m][p] = __dp4a(static_cast<int>(d.y), static_cast<int>(hi), acc[m][p]);
        }
      }
    }
    const float sb = wb.sub_scale(q);
#pragma unroll
    for (int m = 0; m < TM; ++m) {
      const int sum = acc[m][0] + acc[m][1] * 128 + acc[m][2] * 16384;
      const float b = s.nan[m][warp] ? __int_as_float(0x7fffffff) : __fmul_rn(__int2float_rn(sum), kSkFp4IntUnscale);
      s.contrib[warp][q][m][lane] = __fmul_rn(__fmul_rn(b, s.sa[m][warp]), sb);
    }
  }
}

// ---- the stage ring (tiles of one or two rows) ------------------------------------------------------
//
// A lane reads its own column's weights, so each 16-byte load of the plain kernel touches 32 weight
// rows, which leaves L1 the busiest unit far below DRAM's rate (docs/perf-history.md). With
// the ring, each warp copies whole rows instead (32 lanes x 16 contiguous bytes) with cp.async into a
// swizzled slot (chunk c of row r at c ^ (r % 8): a lane's column reads hit eight distinct bank groups
// per quarter-warp), one stage ahead, while the current stage sums; the kernel's barrier after staging
// makes them visible. The activation quads and row scales are copied by the thread that stages them
// (no barrier needed), the weight scales one stage ahead in a register. A slot is refilled only after
// the kernel's two barriers have passed its last reads.
template <GemmWeightKind KIND>
constexpr int row_chunks() {  // 16-byte chunks of a stage's weight row
  return kSkWarps * WeightBlock<KIND>::kChunks;
}

template <GemmWeightKind KIND, int TM>
struct SkinnyRing {
  uint4 w[2][kSkCols * row_chunks<KIND>()];  // [column][chunk], swizzled
  uint2 act[2][TM][kSkThreads];              // four bf16 values, or four e4m3 codes in .x
  float sa[2][TM][kSkWarps];                 // activation codes: their block scales
};

__device__ __forceinline__ int ring_chunk(int row, int c, int per_row) { return row * per_row + (c ^ (row & 7)); }

// Stage st's copies into slot st % 2 (one cp.async group, empty past the last stage). n0: the CTA's
// first column, cols: its valid columns.
template <GemmWeightKind KIND, int TM>
__device__ __forceinline__ void ring_issue(SkinnyRing<KIND, TM>& r, const ExactBlockArgs& p, const Tile& t,
                                           const void* w, const uint8_t* ws, int64_t g, int64_t n0, int cols,
                                           int kb_begin, int kb_end, int st, typename WeightBlock<KIND>::Scale& sb) {
  constexpr int kRow = row_chunks<KIND>(), kPerLane = kRow / kWarp;
  const int kb0 = kb_begin + st * kSkWarps;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, slot = st & 1;
  const int kb = kb0 + warp;
  if (kb0 < kb_end) {
    for (int row = warp; row < cols; row += kSkWarps) {  // warp w copies rows w, w + 8, ...
      const uint4* src = WeightBlock<KIND>::chunks(w, n0 + row, kb0, p.kg);
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int c = lane + i * kWarp;
        if (kb0 + c / WeightBlock<KIND>::kChunks < kb_end) {
          cp_async<16>(&r.w[slot][ring_chunk(row, c, kRow)], src + c);
        }
      }
    }
    if (kb < kb_end && lane < cols) sb = WeightBlock<KIND>::scale(ws, n0 + lane, kb, p.kg);
#pragma unroll
    for (int m = 0; m < TM; ++m) {
      const bool live = m < t.cnt && kb < kb_end;
      const int64_t row = t.r0 + (live ? m : 0), k = g * p.kg + int64_t{live ? kb : 0} * 128 + lane * 4;
      if (p.x) {
        cp_async<8>(&r.act[slot][m][threadIdx.x], p.x + row * p.x_ld + k, live ? 8 : 0);
      } else {
        cp_async<4>(&r.act[slot][m][threadIdx.x], p.codes + row * p.codes_ld + k, live ? 4 : 0);
        const float* sc = p.scales + (g * p.kg / 128 + (live ? kb : 0)) * p.scale_ld + row;
        if (lane == 0) cp_async<4>(&r.sa[slot][m][warp], sc, live ? 4 : 0);
      }
    }
  }
  cp_async_commit();
}

// This lane's column of its warp's K-block of stage st (after the barrier that follows staging).
template <GemmWeightKind KIND, int TM>
__device__ __forceinline__ void ring_weights(WeightBlock<KIND>& wb, const SkinnyRing<KIND, TM>& r, int st) {
  constexpr int kRow = row_chunks<KIND>();
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
#pragma unroll
  for (int i = 0; i < WeightBlock<KIND>::kChunks; ++i) {
    wb.raw[i] = r.w[st & 1][ring_chunk(lane, warp * WeightBlock<KIND>::kChunks + i, kRow)];
  }
}

// Stage st from its slot into the kernel's stage (as stage_acts / stage_acts_bf16 do from global).
template <GemmWeightKind KIND, int TM, typename Smem>
__device__ __forceinline__ void ring_stage(Smem& s, const SkinnyRing<KIND, TM>& r, const ExactBlockArgs& p,
                                           const Tile& t, int kb0, int nb, int st) {
  const int slot = st & 1;
  stage_rows(s, t, kb0, nb, [&](int m, int, bool live, int lane, float(&v)[4]) {
    v[0] = v[1] = v[2] = v[3] = 0.0f;
    if (!live) return 0.0f;
    const uint2 u = r.act[slot][m][threadIdx.x];
    if (p.x) {
      bf16x4(u, v);
      return quantize_decode4(v);
    }
    e4m3x4(u.x, v);
    return lane == 0 ? r.sa[slot][m][threadIdx.x / kWarp] : 0.0f;  // only lane 0's is stored
  });
}

// Split-K epilogue: publish this CTA's contributions; the tile's last CTA sums all of them in
// block order (the order the unsplit kernel uses) and stores y.
template <int TM, int NSUB>
__device__ void split_finish(const ExactBlockArgs& p, const Tile& t, int64_t n, bool col_ok, int nkb) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  const int64_t tile = int64_t{blockIdx.y} * gridDim.x + blockIdx.x;
  if (threadIdx.x == 0) last = atomicAdd(&p.counters[tile], 1) == static_cast<int>(gridDim.z) - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  const int warp = threadIdx.x / kWarp;
  if (warp < t.cnt && col_ok) {
    const int64_t stride = p.rows * p.n;
    const float* src = p.partial + (t.r0 + warp) * p.n + n;
    float c = 0.0f;
#pragma unroll 8
    for (int i = 0; i < nkb * NSUB; ++i) c = __fadd_rn(c, __ldcg(src + i * stride));
    store_out(p.y, p.y_ld, p.y_f32, t.r0 + warp, n, c);
  }
  if (threadIdx.x == 0) p.counters[tile] = 0;
}

template <GemmWeightKind KIND, int TM, bool kInt>
using SkinnySmemOf = std::conditional_t<kInt, SkinnyIntSmem<TM>, SkinnySmem<TM, KIND == GemmWeightKind::kFp4 ? 4 : 1>>;

template <GemmWeightKind KIND, int TM, bool kInt>
constexpr size_t kSkRingAt = (sizeof(SkinnySmemOf<KIND, TM, kInt>) + 15) / 16 * 16;

template <GemmWeightKind KIND, int TM, bool kInt, bool kRing>
constexpr size_t kSkSmem = kSkRingAt<KIND, TM, kInt> + (kRing ? sizeof(SkinnyRing<KIND, TM>) : 0);

// kInt (FP4 only): the integer block sums above instead of fp64 ones; the same bits. kRing: the
// stage ring above.
template <GemmWeightKind KIND, int TM, bool kInt, bool kRing>
__global__ void __launch_bounds__(kSkThreads) skinny_block_kernel(const ExactBlockArgs p) {
  static_assert(!kInt || KIND == GemmWeightKind::kFp4);
  constexpr int kSub = KIND == GemmWeightKind::kFp4 ? 4 : 1;
  if (!p.offsets && !p.partial) {  // a dense weight: this CTA's rows, while the previous kernel finishes
    const int64_t row_bytes = KIND == GemmWeightKind::kFp4 ? p.kg / 2 : p.kg, col_tiles = cdiv(p.ng, kSkCols);
    const int64_t c0 = (blockIdx.y % col_tiles) * kSkCols, n0 = blockIdx.y / col_tiles * p.ng + c0;
    prefetch_rows_l2(static_cast<const uint8_t*>(p.w) + n0 * row_bytes, row_bytes, imin(kSkCols, p.ng - c0), 0,
                     row_bytes);
  }
  pdl_enter();
  extern __shared__ float4 smem_raw[];
  auto& s = *reinterpret_cast<SkinnySmemOf<KIND, TM, kInt>*>(smem_raw);
  auto& ring = *reinterpret_cast<SkinnyRing<KIND, TM>*>(reinterpret_cast<char*>(smem_raw) + kSkRingAt<KIND, TM, kInt>);
  if constexpr (kInt) fill_table(s);  // read after the first stage's barrier
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  Tile t;
  if (!row_tile(p, TM, t)) return;
  const int64_t col_tiles = (p.ng + kSkCols - 1) / kSkCols;
  const int64_t g = blockIdx.y / col_tiles;
  const int64_t nl = (blockIdx.y % col_tiles) * kSkCols + lane;  // this lane's column within the group
  const bool col_ok = nl < p.ng;
  const int64_t n = g * p.ng + nl;
  const void* w = p.offsets ? p.w_list[t.e] : p.w;
  const uint8_t* ws = p.offsets ? p.w_scale_list[t.e] : p.w_scale;
  const uint8_t* codes = p.codes ? p.codes + g * p.kg : nullptr;
  const float* scales = p.scales ? p.scales + (g * p.kg / 128) * p.scale_ld : nullptr;
  const int nkb = static_cast<int>(p.kg / 128);
  // Split-K: this CTA's K-blocks only (one stage).
  const int kb_begin = p.partial ? static_cast<int>(blockIdx.z) * kSkWarps : 0;
  const int kb_end = p.partial ? min(nkb, kb_begin + kSkWarps) : nkb;
  const bool combiner = warp < TM;  // thread (warp, lane) sums output (row warp, column lane)
  float c = 0.0f;
  typename WeightBlock<KIND>::Scale sb_next{};   // the ring: the next stage's weight scales
  [[maybe_unused]] const int64_t n0 = n - lane;  // the CTA's first column
  [[maybe_unused]] const int cols = static_cast<int>(min(int64_t{kSkCols}, p.ng - (nl - lane)));
  if constexpr (kRing) ring_issue(ring, p, t, w, ws, g, n0, cols, kb_begin, kb_end, 0, sb_next);
  for (int kb0 = kb_begin, st = 0; kb0 < kb_end; kb0 += kSkWarps, ++st) {
    const int nb = min(kSkWarps, kb_end - kb0);
    const bool active = kb0 + warp < kb_end && col_ok;
    WeightBlock<KIND> wb;
    if constexpr (kRing) {
      wb.sb = sb_next;
      ring_issue(ring, p, t, w, ws, g, n0, cols, kb_begin, kb_end, st + 1, sb_next);
      cp_async_wait<1>();  // this thread's copies of stage st have landed
      ring_stage(s, ring, p, t, kb0, nb, st);
    } else {
      if (active) load_block(wb, w, ws, n, kb0 + warp, p.kg);  // in flight while the activations are staged
      if (p.x) {
        stage_acts_bf16(s, p.x + g * p.kg, p.x_ld, t, kb0, nb);
      } else {
        stage_acts(s, codes, p.codes_ld, scales, p.scale_ld, t, kb0, nb);
      }
    }
    __syncthreads();
    if constexpr (kRing) {
      if (active) ring_weights(wb, ring, st);
    }
    if (active) block_products(s, wb, warp, lane);
    __syncthreads();
    if (!combiner || !col_ok) continue;
    if (p.partial) {
      if (warp < t.cnt) {
        float* dst = p.partial + (t.r0 + warp) * p.n + n;
        for (int j = 0; j < nb; ++j) {
#pragma unroll
          for (int q = 0; q < kSub; ++q) dst[((kb0 + j) * kSub + q) * p.rows * p.n] = s.contrib[j][q][warp][lane];
        }
      }
    } else {
      for (int j = 0; j < nb; ++j) {
#pragma unroll
        for (int q = 0; q < kSub; ++q) c = __fadd_rn(c, s.contrib[j][q][warp][lane]);
      }
    }
  }
  if (p.partial) {
    split_finish<TM, kSub>(p, t, n, col_ok, nkb);
  } else if (combiner && warp < t.cnt && col_ok) {
    store_out(p.y, p.y_ld, p.y_f32, t.r0 + warp, n, c);
  }
}

// ---- tiled kernels ---------------------------------------------------------------------------------

constexpr int kTlRows = 64;
constexpr int kTlCols = 64;
constexpr int kTlK = 32;  // one FP4 sub-block; a quarter of an FP8 block
constexpr int kTlThreads = 256;

template <typename T>  // double: block-scaled weights (exact block sums); float: plain weights
struct TiledSmem {
  T a[2][kTlK][kTlRows];
  T w[2][kTlK][kTlCols];
  float amax[kTlThreads / kTlRows][kTlRows];  // bf16 input: each loader's part of its row's block amax
  float sa[kTlRows];                          // bf16 input: the current K-block's row scales
};

// Plain weights: P (4x4 micro-tile of rows tm*4.., columns tn*4..) continued over one stage, k ascending.
template <bool kExactProducts>
__device__ __forceinline__ void tile_stage_plain(const float (*a)[kTlRows], const float (*w)[kTlCols], int tm, int tn,
                                                 float (&P)[4][4]) {
#pragma unroll 8
  for (int k = 0; k < kTlK; ++k) {
    const float4 av = *reinterpret_cast<const float4*>(&a[k][tm * 4]);
    const float4 wv = *reinterpret_cast<const float4*>(&w[k][tn * 4]);
    const float ar[4] = {av.x, av.y, av.z, av.w};
    const float wr[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        P[i][j] = kExactProducts ? __fmaf_rn(ar[i], wr[j], P[i][j]) : __fadd_rn(P[i][j], __fmul_rn(ar[i], wr[j]));
      }
    }
  }
}

// Block sums of a 4x4 micro-tile over one stage: rows tm*4.., columns tcol(tn, 0..3); exact fp64
// products and sums. The two column pairs sit 32 apart, so a quarter warp's 16-byte loads of w are
// contiguous (no bank conflicts).
__device__ __forceinline__ int tcol(int tn, int j) { return (j / 2) * (kTlCols / 2) + tn * 2 + j % 2; }

__device__ __forceinline__ void tile_stage(const double (*a)[kTlRows], const double (*w)[kTlCols], int tm, int tn,
                                           double (&P)[4][4]) {
#pragma unroll 4
  for (int k = 0; k < kTlK; ++k) {
    const double2 a01 = *reinterpret_cast<const double2*>(&a[k][tm * 4]);
    const double2 a23 = *reinterpret_cast<const double2*>(&a[k][tm * 4 + 2]);
    const double2 w01 = *reinterpret_cast<const double2*>(&w[k][tcol(tn, 0)]);
    const double2 w23 = *reinterpret_cast<const double2*>(&w[k][tcol(tn, 2)]);
    const double ar[4] = {a01.x, a01.y, a23.x, a23.y};
    const double wr[4] = {w01.x, w01.y, w23.x, w23.y};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int j = 0; j < 4; ++j) P[i][j] = __fma_rn(ar[i], wr[j], P[i][j]);
    }
  }
}

// Stores 8 values of row/column `idx` at k offsets q*8.. of a stage buffer ([k][idx] layout).
template <typename T, int LD>
__device__ __forceinline__ void put8(T (*buf)[LD], int q, int idx, const float* v) {
#pragma unroll
  for (int i = 0; i < 8; ++i) buf[q * 8 + i][idx] = v[i];
}

template <GemmWeightKind KIND>
__device__ __forceinline__ void decode_w8(uint2 raw, float* v) {
  if constexpr (KIND == GemmWeightKind::kFp8) {
    e4m3x4(raw.x, v);
    e4m3x4(raw.y, v + 4);
  } else {
    e2m1x8(raw.x, v);
  }
}

template <GemmWeightKind KIND>
__global__ void __launch_bounds__(kTlThreads) tiled_block_kernel(const ExactBlockArgs p) {
  pdl_enter();
  extern __shared__ float4 smem_raw[];
  auto& s = *reinterpret_cast<TiledSmem<double>*>(smem_raw);
  Tile t;
  if (!row_tile(p, kTlRows, t)) return;
  const int64_t col_tiles = (p.ng + kTlCols - 1) / kTlCols;
  const int64_t g = blockIdx.y / col_tiles;
  const int64_t c0 = (blockIdx.y % col_tiles) * kTlCols;  // first column within the group
  const void* w = p.offsets ? p.w_list[t.e] : p.w;
  const uint8_t* ws = p.offsets ? p.w_scale_list[t.e] : p.w_scale;
  constexpr bool kFp4 = KIND == GemmWeightKind::kFp4;
  constexpr int kWBytes = kFp4 ? 4 : 8;  // weight bytes of 8 elements

  // Loader: thread owns row/column lr of the tile and k offsets lq*8.. of each stage.
  const int lr = threadIdx.x % kTlRows, lq = threadIdx.x / kTlRows;
  const bool a_ok = lr < t.cnt;
  const uint8_t* a_src = p.codes ? p.codes + (t.r0 + (a_ok ? lr : 0)) * p.codes_ld + g * p.kg + lq * 8 : nullptr;
  const bool w_ok = c0 + lr < p.ng;
  const uint8_t* w_src =
      static_cast<const uint8_t*>(w) + (g * p.ng + (w_ok ? c0 + lr : 0)) * (kFp4 ? p.kg / 2 : p.kg) + lq * kWBytes;
  // bf16 input (p.x): the loader reads 8 values and quantizes them when storing the stage, with the
  // row scales of their K-block, found by the tile before its first stage (block_scales).
  const bool from_x = p.x != nullptr;
  const uint16_t* x_row = from_x ? p.x + (t.r0 + (a_ok ? lr : 0)) * p.x_ld + g * p.kg : nullptr;
  auto block_scales = [&](int64_t b) {
    float amax = 0.0f;
    if (a_ok) {
      float v[8];
      for (int i = 0; i < 4; ++i) {
        bf16x8(__ldg(reinterpret_cast<const uint4*>(x_row + b * 128 + lq * 32 + i * 8)), v);
        for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(v[j]));
      }
    }
    s.amax[lq][lr] = amax;
    __syncthreads();  // also: every fold and store of the previous block is done with s.sa
    if (threadIdx.x < kTlRows) {
      float m = 0.0f;
      for (int i = 0; i < kTlThreads / kTlRows; ++i) m = fmaxf(m, s.amax[i][threadIdx.x]);
      s.sa[threadIdx.x] = static_cast<int>(threadIdx.x) < t.cnt ? act_scale(m) : 0.0f;
    }
    __syncthreads();
  };
  uint2 a_reg = {0, 0}, w_reg = {0, 0};
  uint4 x_reg = {0, 0, 0, 0};
  auto load = [&](int st) {
    if (a_ok && from_x) x_reg = __ldg(reinterpret_cast<const uint4*>(x_row + int64_t{st} * kTlK + lq * 8));
    if (a_ok && !from_x) a_reg = __ldg(reinterpret_cast<const uint2*>(a_src + int64_t{st} * kTlK));
    if (w_ok) {
      const uint8_t* src = w_src + int64_t{st} * kTlK * kWBytes / 8;
      if constexpr (kFp4) {
        w_reg.x = __ldg(reinterpret_cast<const uint32_t*>(src));
      } else {
        w_reg = __ldg(reinterpret_cast<const uint2*>(src));
      }
    }
  };
  auto store = [&](int buf) {
    float v[8];
    if (from_x) {
      bf16x8(x_reg, v);
      const float inv = pow2_inverse(s.sa[lr]);
      a_reg.x = a_reg.y = 0;
      for (int i = 0; i < 4; ++i) {
        a_reg.x |= a_ok ? act_code(v[i], inv) << (8 * i) : 0u;
        a_reg.y |= a_ok ? act_code(v[i + 4], inv) << (8 * i) : 0u;
      }
    }
    e4m3x4(a_reg.x, v);
    e4m3x4(a_reg.y, v + 4);
    put8(s.a[buf], lq, lr, v);
    decode_w8<KIND>(w_reg, v);
    put8(s.w[buf], lq, lr, v);
  };

  // Compute: micro-tile rows tm*4.., columns tn*4...
  const int tm = threadIdx.x / 16, tn = threadIdx.x % 16;
  const float* scales = p.scales ? p.scales + (g * p.kg / 128) * p.scale_ld : nullptr;
  double P[4][4] = {};  // exact block sums
  float C[4][4] = {};
  auto fold = [&](int64_t k0) {  // C += scaled P (rounded once) of the (sub-)block holding stage k0
    float sa[4], sb[4];
    for (int i = 0; i < 4; ++i) {
      const int r = tm * 4 + i;
      sa[i] = from_x ? s.sa[r] : r < t.cnt ? __ldg(scales + (k0 / 128) * p.scale_ld + t.r0 + r) : 0.0f;
    }
    for (int j = 0; j < 4; ++j) {
      const int64_t cl = c0 + tcol(tn, j), n = g * p.ng + cl;
      const uint8_t* e = kFp4 ? ws + n * (p.kg / 32) + k0 / 32 : ws + (n / 128) * (p.kg / 128) + k0 / 128;
      sb[j] = cl < p.ng ? ue8m0_f(__ldg(e)) : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float b = __double2float_rn(P[i][j]);
        const float v = kFp4 ? __fmul_rn(__fmul_rn(b, sa[i]), sb[j]) : __fmul_rn(b, __fmul_rn(sa[i], sb[j]));
        C[i][j] = __fadd_rn(C[i][j], v);
        P[i][j] = 0.0;
      }
    }
  };

  const int stages = static_cast<int>(p.kg / kTlK);
  if (from_x) block_scales(0);
  load(0);
  store(0);
  __syncthreads();
  for (int st = 0; st < stages; ++st) {
    if (st + 1 < stages) load(st + 1);
    tile_stage(s.a[st & 1], s.w[st & 1], tm, tn, P);
    const int64_t k0 = int64_t{st} * kTlK;
    if (kFp4 || (k0 + kTlK) % 128 == 0) fold(k0);
    if (st + 1 < stages) {
      if (from_x && (k0 + kTlK) % 128 == 0) block_scales((k0 + kTlK) / 128);
      store((st + 1) & 1);
    }
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) {
      const int r = tm * 4 + i;
      const int64_t cl = c0 + tcol(tn, j);
      if (r < t.cnt && cl < p.ng) store_out(p.y, p.y_ld, p.y_f32, t.r0 + r, g * p.ng + cl, C[i][j]);
    }
  }
}

// Eight consecutive elements of a plain row at column k (zero past kg); vector loads when allowed.
template <bool kF32>
__device__ __forceinline__ void load_plain8(const void* row, int64_t k, int64_t kg, bool vec, float* v) {
  if (vec && k + 8 <= kg) {
    if constexpr (kF32) {
      const auto* src = reinterpret_cast<const float4*>(static_cast<const float*>(row) + k);
      const float4 lo = __ldg(src), hi = __ldg(src + 1);
      v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w, v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
    } else {
      bf16x8(__ldg(reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(row) + k)), v);
    }
    return;
  }
  for (int i = 0; i < 8; ++i) {
    if (k + i >= kg) {
      v[i] = 0.0f;
    } else if constexpr (kF32) {
      v[i] = static_cast<const float*>(row)[k + i];
    } else {
      v[i] = bf16_to_f(static_cast<const uint16_t*>(row)[k + i]);
    }
  }
}

// The weight and output of this CTA: grid rows past the first weight's tiles take the pair's second.
struct PlainPairHalf {
  __device__ PlainPairHalf(const ExactPlainArgs& p, int64_t col_tiles) {
    const int64_t tiles = p.groups * col_tiles;
    const bool second = p.w_b && blockIdx.y >= tiles;
    by = blockIdx.y - (second ? tiles : 0);
    w = second ? p.w_b : p.w;
    y = second ? p.y_b : p.y;
  }
  int64_t by;  // the CTA's column tile within its weight
  const void* w;
  void* y;
};

template <bool kWF32>
__global__ void __launch_bounds__(kTlThreads) tiled_plain_kernel(const ExactPlainArgs p, bool vec) {
  pdl_enter();
  __shared__ __align__(16) TiledSmem<float> s;
  const int64_t r0 = int64_t{blockIdx.x} * kTlRows;
  const int cnt = static_cast<int>(imin(kTlRows, p.rows - r0));
  const int64_t col_tiles = (p.ng + kTlCols - 1) / kTlCols;
  const PlainPairHalf half(p, col_tiles);
  const int64_t g = half.by / col_tiles;
  const int64_t c0 = (half.by % col_tiles) * kTlCols;
  const int lr = threadIdx.x % kTlRows, lq = threadIdx.x / kTlRows;
  const bool a_ok = lr < cnt, w_ok = c0 + lr < p.ng;
  const uint16_t* a_row = p.x + (r0 + (a_ok ? lr : 0)) * p.x_ld + g * p.kg;
  const int64_t wn = g * p.ng + (w_ok ? c0 + lr : 0);
  const void* w_row = kWF32 ? static_cast<const void*>(static_cast<const float*>(half.w) + wn * p.kg)
                            : static_cast<const void*>(static_cast<const uint16_t*>(half.w) + wn * p.kg);
  float a_reg[8], w_reg[8];
  auto load = [&](int st) {
    const int64_t k = int64_t{st} * kTlK + lq * 8;
    if (a_ok) {
      load_plain8<false>(a_row, k, p.kg, vec, a_reg);
    } else {
      for (float& v : a_reg) v = 0.0f;
    }
    if (w_ok) {
      load_plain8<kWF32>(w_row, k, p.kg, vec, w_reg);
    } else {
      for (float& v : w_reg) v = 0.0f;
    }
  };
  const int tm = threadIdx.x / 16, tn = threadIdx.x % 16;
  float P[4][4] = {};
  const int stages = static_cast<int>((p.kg + kTlK - 1) / kTlK);
  load(0);
  put8(s.a[0], lq, lr, a_reg);
  put8(s.w[0], lq, lr, w_reg);
  __syncthreads();
  for (int st = 0; st < stages; ++st) {
    if (st + 1 < stages) load(st + 1);
    tile_stage_plain<!kWF32>(s.a[st & 1], s.w[st & 1], tm, tn, P);
    if (st + 1 < stages) {
      put8(s.a[(st + 1) & 1], lq, lr, a_reg);
      put8(s.w[(st + 1) & 1], lq, lr, w_reg);
    }
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) {
      const int r = tm * 4 + i;
      const int64_t cl = c0 + tn * 4 + j;
      if (r < cnt && cl < p.ng) store_out(half.y, p.y_ld, p.y_f32, r0 + r, g * p.ng + cl, P[i][j]);
    }
  }
}

// ---- skinny plain kernel -------------------------------------------------------------------------

constexpr int kPsBytes = 512;  // weight bytes of one column per stage
constexpr int kPsRowPad = 16;  // puts the lanes' 16-byte reads of their own rows on distinct banks

// Ring depth: ~1.5 KB of each weight row in flight (DRAM latency); tiles of 8+ rows keep two stages
// (their sums take longer than a load, and the smaller ring lets two or three CTAs share an SM).
constexpr int plain_slots(int tm) { return tm >= 8 ? 2 : 4; }
// Rows a consumer warp sums (its lanes' independent chains) and consumer warps of a TM-row tile.
constexpr int plain_rows_per_warp(int tm) { return tm < 4 ? tm : 4; }
constexpr int plain_consumers(int tm) { return tm / plain_rows_per_warp(tm); }
constexpr int plain_threads(int tm) { return (plain_consumers(tm) + 1) * kWarp; }

template <bool kWF32, int TM>
struct PlainSmem {
  static constexpr int kK = kPsBytes / (kWF32 ? 4 : 2);  // k per stage
  static constexpr int kSlots = plain_slots(TM);
  uint8_t w[kSlots][kSkCols][kPsBytes + kPsRowPad];
  uint16_t x[kSlots][TM][kK];
  float a[kSlots][TM][kK];
};

struct PlainTile {
  const uint8_t* w_lane;  // this lane's 16-byte chunk of the tile's first weight row, at k = 0
  int64_t w_row;          // weight row bytes
  const uint16_t* x;      // the tile's first activation row, at the group's first column
  int64_t x_ld, kg;
  int wrows, cnt;  // valid weight rows (columns of y) and activation rows of the tile
};

// 16 bytes to shared memory, the first `bytes` from src and zeros after them; cp.async when the
// operands are 16-byte aligned, else plain copies.
template <bool kAsync>
__device__ __forceinline__ void copy16(void* dst, const void* src, int bytes) {
  if constexpr (kAsync) {
    cp_async<16>(dst, src, bytes);
    return;
  }
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  for (int i = 0; i < 16; ++i) d[i] = i < bytes ? s[i] : 0;
}

__device__ __forceinline__ int clamp16(int64_t bytes) { return static_cast<int>(imax(0, imin(16, bytes))); }

// Zeros the weight rows past the tile's columns and the activation rows past its rows in every
// slot, once: the stages never write them.
template <bool kWF32, int TM>
__device__ void plain_zero_tails(PlainSmem<kWF32, TM>& s, const PlainTile& c) {
  const int lane = threadIdx.x % kWarp;
  for (int slot = 0; slot < PlainSmem<kWF32, TM>::kSlots; ++slot) {
    for (int r = c.wrows; r < kSkCols; ++r)
      *reinterpret_cast<uint4*>(&s.w[slot][r][lane * 16]) = make_uint4(0, 0, 0, 0);
    for (int m = c.cnt; m < TM; ++m) {
      for (int i = lane; i < PlainSmem<kWF32, TM>::kK; i += kWarp) s.x[slot][m][i] = 0;
    }
  }
}

// Issues stage k0 into ring slot `slot`: each lane copies its 16-byte chunk of every weight row
// (coalesced 512-byte rows) and a share of the activation rows; zeros past K.
template <bool kAsync, bool kWF32, int TM>
__device__ __forceinline__ void plain_issue(PlainSmem<kWF32, TM>& s, int slot, int64_t k0, const PlainTile& c) {
  constexpr int kEsz = kWF32 ? 4 : 2;
  constexpr int kK = PlainSmem<kWF32, TM>::kK;
  const int lane = threadIdx.x % kWarp;
  const int wbytes = k0 + kK <= c.kg ? 16 : clamp16((c.kg - k0 - lane * (16 / kEsz)) * kEsz);
  const uint8_t* src = c.w_lane + k0 * kEsz;
  for (int r = 0; r < c.wrows; ++r, src += c.w_row) {
    copy16<kAsync>(&s.w[slot][r][lane * 16], wbytes > 0 ? src : c.w_lane, wbytes);
  }
  constexpr int kChunks = kK / 8;
  for (int i = lane; i < c.cnt * kChunks; i += kWarp) {
    const int m = i / kChunks, ch = i % kChunks;
    const int64_t k = k0 + ch * 8;
    const int bytes = clamp16((c.kg - k) * 2);
    copy16<kAsync>(&s.x[slot][m][ch * 8], bytes > 0 ? c.x + m * c.x_ld + k : c.x, bytes);
  }
}

// One 16-byte chunk of this lane's weight row as floats (8 bf16 or 4 f32).
template <bool kWF32>
__device__ __forceinline__ void plain_w(const uint8_t* p, float* w) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  if constexpr (kWF32) {
    w[0] = __uint_as_float(raw.x), w[1] = __uint_as_float(raw.y);
    w[2] = __uint_as_float(raw.z), w[3] = __uint_as_float(raw.w);
  } else {
    bf16x8(raw, w);
  }
}

// Activation rows of a landed stage as fp32, for the consumer's broadcast reads.
template <bool kWF32, int TM>
__device__ __forceinline__ void plain_decode(PlainSmem<kWF32, TM>& s, int slot) {
  constexpr int kK = PlainSmem<kWF32, TM>::kK;
  for (int i = threadIdx.x % kWarp; i < TM * kK / 8; i += kWarp) {
    const int m = i / (kK / 8), ch = i % (kK / 8);
    float v[8];
    bf16x8(*reinterpret_cast<const uint4*>(&s.x[slot][m][ch * 8]), v);
    *reinterpret_cast<float4*>(&s.a[slot][m][ch * 8]) = make_float4(v[0], v[1], v[2], v[3]);
    *reinterpret_cast<float4*>(&s.a[slot][m][ch * 8 + 4]) = make_float4(v[4], v[5], v[6], v[7]);
  }
}

// acc[m] += the stage's products of this lane's column for rows m0 + m, k ascending. The next chunk's
// weights and activations are read before the current chunk's sums, so only the FMA chain's own
// latency remains.
template <bool kWF32, int TM, int R>
__device__ __forceinline__ void plain_dot(const PlainSmem<kWF32, TM>& s, int slot, int m0, float (&acc)[R]) {
  constexpr int kK = PlainSmem<kWF32, TM>::kK;
  constexpr int kPer = kWF32 ? 4 : 8;  // elements of a 16-byte chunk
  constexpr int kQ = kPer / 4;         // float4s of activations per row and chunk
  const uint8_t* row = s.w[slot][threadIdx.x % kWarp];
  float w[8], wn[8];
  float4 a[R][kQ], an[R][kQ];
  auto load = [&](int k, float(&wv)[8], float4(&av)[R][kQ]) {
    plain_w<kWF32>(row + k * (16 / kPer), wv);
#pragma unroll
    for (int m = 0; m < R; ++m) {
#pragma unroll
      for (int q = 0; q < kQ; ++q) av[m][q] = *reinterpret_cast<const float4*>(&s.a[slot][m0 + m][k + 4 * q]);
    }
  };
  load(0, w, a);
#pragma unroll 4
  for (int k = 0; k < kK; k += kPer) {
    if (k + kPer < kK) load(k + kPer, wn, an);
#pragma unroll
    for (int m = 0; m < R; ++m) {
#pragma unroll
      for (int q = 0; q < kQ; ++q) {
        const float ar[4] = {a[m][q].x, a[m][q].y, a[m][q].z, a[m][q].w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float wv = w[4 * q + e];
          acc[m] = kWF32 ? __fadd_rn(acc[m], __fmul_rn(ar[e], wv)) : __fmaf_rn(ar[e], wv, acc[m]);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i) w[i] = wn[i];
#pragma unroll
    for (int m = 0; m < R; ++m) {
#pragma unroll
      for (int q = 0; q < kQ; ++q) a[m][q] = an[m][q];
    }
  }
}

// Named barriers of the ring: slot i is full (producer -> consumers) / empty (consumers -> producer).
constexpr int kFullBar = 1, kEmptyBar = 1 + plain_slots(1);

// Producer warp: stage j has landed (its cp.async group and older ones are complete): decode its
// activations and hand the slot to the consumers.
template <bool kWF32, int TM>
__device__ __forceinline__ void plain_publish(PlainSmem<kWF32, TM>& s, int j) {
  constexpr int kSlots = PlainSmem<kWF32, TM>::kSlots;
  __syncwarp();  // every producer lane's copies are visible
  plain_decode(s, j % kSlots);
  __syncwarp();
  __threadfence_block();
  bar_arrive(kFullBar + j % kSlots, plain_threads(TM));
}

// The last warp streams weight and activation stages through the ring (cp.async); the consumer warps
// before it only run the sums, four rows (chains) a lane at most, whose latency or FMA rate is the
// floor of this kernel. Tiles of up to 32 rows (eight consumers) read each weight row once for all.
template <bool kAsync, bool kWF32, int TM>
__global__ void __launch_bounds__(plain_threads(TM)) skinny_plain_kernel(const ExactPlainArgs p) {
  extern __shared__ float4 smem_raw[];
  auto& s = *reinterpret_cast<PlainSmem<kWF32, TM>*>(smem_raw);
  constexpr int kK = PlainSmem<kWF32, TM>::kK;
  constexpr int kEsz = kWF32 ? 4 : 2;
  constexpr int kSlots = PlainSmem<kWF32, TM>::kSlots;
  constexpr int kAhead = kSlots - 1;  // stages in flight behind the one being published
  constexpr int kCons = plain_consumers(TM), kRows = plain_rows_per_warp(TM), kAll = plain_threads(TM);
  const int lane = threadIdx.x % kWarp;
  const int64_t col_tiles = (p.ng + kSkCols - 1) / kSkCols;
  const PlainPairHalf half(p, col_tiles);
  const int64_t g = half.by / col_tiles, c0 = (half.by % col_tiles) * kSkCols, r0 = int64_t{blockIdx.x} * TM;
  PlainTile c;
  c.w_row = p.kg * kEsz;
  c.wrows = static_cast<int>(imin(kSkCols, p.ng - c0));
  prefetch_rows_l2(static_cast<const uint8_t*>(half.w) + (g * p.ng + c0) * c.w_row, c.w_row, c.wrows, 0, c.w_row);
  pdl_enter();
  c.w_lane = static_cast<const uint8_t*>(half.w) + (g * p.ng + c0) * c.w_row + lane * 16;
  c.x = p.x + r0 * p.x_ld + g * p.kg;
  c.x_ld = p.x_ld;
  c.kg = p.kg;
  c.cnt = static_cast<int>(imin(TM, p.rows - r0));
  const int stages = static_cast<int>((p.kg + kK - 1) / kK);
  if (threadIdx.x >= kCons * kWarp) {  // producer
    plain_zero_tails(s, c);
    for (int st = 0; st < stages; ++st) {
      if (st >= kSlots) bar_sync(kEmptyBar + st % kSlots, kAll);  // the consumers are done with stage st - slots
      plain_issue<kAsync>(s, st % kSlots, int64_t{st} * kK, c);
      cp_async_commit();
      if (st >= kAhead) {
        cp_async_wait<kAhead>();
        plain_publish(s, st - kAhead);
      }
    }
    cp_async_wait<0>();
    for (int j = max(0, stages - kAhead); j < stages; ++j) plain_publish(s, j);
    return;
  }
  const int m0 = static_cast<int>(threadIdx.x / kWarp) * kRows;  // the consumer warp's first row
  float acc[kRows];
  for (float& v : acc) v = 0.0f;
  for (int st = 0; st < stages; ++st) {
    bar_sync(kFullBar + st % kSlots, kAll);
    plain_dot(s, st % kSlots, m0, acc);
    if (st + kSlots < stages) bar_arrive(kEmptyBar + st % kSlots, kAll);
  }
  if (lane >= c.wrows) return;
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    if (m0 + m < c.cnt) store_out(half.y, p.y_ld, p.y_f32, r0 + m0 + m, g * p.ng + c0 + lane, acc[m]);
  }
}

// ---- launchers -----------------------------------------------------------------------------------

bool aligned(const void* p, uintptr_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

dim3 grid2(int64_t x, int64_t y) {
  DSV4_CUDA_REQUIRE(x > 0 && x < (int64_t{1} << 31) && y > 0 && y <= 65535, "gemm: grid out of range");
  return dim3(static_cast<unsigned>(x), static_cast<unsigned>(y));
}

template <GemmWeightKind KIND, int TM, bool kInt, bool kRing>
void launch_skinny_as(const ExactBlockArgs& p, int64_t tiles, int64_t splits, cudaStream_t stream) {
  constexpr size_t kSmem = kSkSmem<KIND, TM, kInt, kRing>;
  allow_dynamic_smem(skinny_block_kernel<KIND, TM, kInt, kRing>, kSmem);
  dim3 grid = grid2(tiles, p.groups * cdiv(p.ng, kSkCols));
  grid.z = static_cast<unsigned>(splits);
  launch_kernel(skinny_block_kernel<KIND, TM, kInt, kRing>, grid, kSkThreads, kSmem, stream, p);
}

// One- and two-row tiles (decode) copy the next K stage's weights and activations through a cp.async
// ring while the current one sums (measured faster in decode steps; the same bits). FP4 tiles of two or
// more rows sum with int32 dp4a over activation digits, one-row tiles in fp64, where the two measured
// equal (both the exact sum rounded once: docs/perf-history.md, sessions 10-11).
template <GemmWeightKind KIND, int TM>
void launch_skinny_block(const ExactBlockArgs& p, int64_t tiles, int64_t splits, cudaStream_t stream) {
  constexpr bool kInt = KIND == GemmWeightKind::kFp4 && TM > 1;
  launch_skinny_as<KIND, TM, kInt, (TM <= 2)>(p, tiles, splits, stream);
}

template <GemmWeightKind KIND>
void launch_block(const ExactBlockArgs& p, bool tiled, int tm, int64_t splits, cudaStream_t stream) {
  const int64_t experts = p.offsets ? p.experts : 0;
  if (tiled) {
    constexpr size_t kSmem = sizeof(TiledSmem<double>);
    allow_dynamic_smem(tiled_block_kernel<KIND>, kSmem);
    launch_kernel(tiled_block_kernel<KIND>, grid2(row_tiles(p.rows, kTlRows, experts), p.groups * cdiv(p.ng, kTlCols)),
                  kTlThreads, kSmem, stream, p);
    return;
  }
  const int64_t tiles = row_tiles(p.rows, tm, experts);
  switch (tm) {
    case 1:
      return launch_skinny_block<KIND, 1>(p, tiles, splits, stream);
    case 2:
      return launch_skinny_block<KIND, 2>(p, tiles, splits, stream);
    case 4:
      return launch_skinny_block<KIND, 4>(p, tiles, splits, stream);
    default:
      return launch_skinny_block<KIND, 8>(p, tiles, splits, stream);
  }
}

template <bool kAsync, bool kWF32, int TM>
void launch_skinny_plain_as(const ExactPlainArgs& p, cudaStream_t stream) {
  constexpr size_t kSmem = sizeof(PlainSmem<kWF32, TM>);
  allow_dynamic_smem(skinny_plain_kernel<kAsync, kWF32, TM>, kSmem);
  const dim3 grid = grid2(cdiv(p.rows, TM), (p.w_b ? 2 : 1) * p.groups * cdiv(p.ng, kSkCols));
  launch_kernel(skinny_plain_kernel<kAsync, kWF32, TM>, grid, plain_threads(TM), kSmem, stream, p);
}

template <bool kWF32, int TM>
void launch_skinny_plain(const ExactPlainArgs& p, bool async, cudaStream_t stream) {
  if (async) {
    launch_skinny_plain_as<true, kWF32, TM>(p, stream);
  } else {
    launch_skinny_plain_as<false, kWF32, TM>(p, stream);
  }
}

// Rows of a skinny plain tile past four: one tile for all rows (each weight row read once; measured
// faster for decode batches) while the tiles still cover the SMs (or p.min_wide_tiles), else tiles of four.
int plain_tile_rows(const ExactPlainArgs& p) {
  if (p.rows <= 4) return 4;
  const int64_t cols = (p.w_b ? 2 : 1) * p.groups * cdiv(p.ng, kSkCols);
  int tm = p.rows <= 8 ? 8 : p.rows <= 16 ? 16 : 32;
  const int64_t want = p.min_wide_tiles > 0 ? p.min_wide_tiles : sm_count();
  while (tm >= 8 && cdiv(p.rows, tm) * cols < want) tm /= 2;
  return tm < 8 ? 4 : tm;
}

template <bool kWF32>
void launch_plain(const ExactPlainArgs& p, bool tiled, bool vec, cudaStream_t stream) {
  if (tiled) {
    launch_kernel(tiled_plain_kernel<kWF32>,
                  grid2(cdiv(p.rows, kTlRows), (p.w_b ? 2 : 1) * p.groups * cdiv(p.ng, kTlCols)), kTlThreads, 0, stream,
                  p, vec);
  } else if (p.rows == 1) {
    launch_skinny_plain<kWF32, 1>(p, vec, stream);
  } else if (p.rows == 2) {
    launch_skinny_plain<kWF32, 2>(p, vec, stream);
  } else {
    switch (plain_tile_rows(p)) {
      case 8:
        return launch_skinny_plain<kWF32, 8>(p, vec, stream);
      case 16:
        return launch_skinny_plain<kWF32, 16>(p, vec, stream);
      case 32:
        return launch_skinny_plain<kWF32, 32>(p, vec, stream);
      default:
        return launch_skinny_plain<kWF32, 4>(p, vec, stream);
    }
  }
}

// The tiled kernel when there are enough rows per weight and enough 64x64 tiles to fill the GPU.
bool pick_tiled(int64_t rows_per_weight, int64_t tiles) { return rows_per_weight > 32 && tiles >= sm_count(); }

int skinny_rows(int64_t rows_per_weight) {
  return rows_per_weight >= 5 ? 8 : rows_per_weight >= 3 ? 4 : rows_per_weight >= 2 ? 2 : 1;
}

// How a block-scaled GEMM runs: kernel, skinny row tile, and K splits (1: none).
struct BlockPlan {
  bool tiled = false;
  int tm = 1;
  int64_t splits = 1;
  SplitNeed need;
};

BlockPlan plan_block(const ExactBlockArgs& a) {
  BlockPlan pl;
  const int64_t per_weight = a.offsets ? cdiv(a.rows, a.experts) : a.rows;
  pl.tiled = pick_tiled(per_weight, cdiv(a.rows, kTlRows) * a.groups * cdiv(a.ng, kTlCols));
  pl.tm = skinny_rows(per_weight);
  const int64_t ctas = cdiv(a.rows, pl.tm) * a.groups * cdiv(a.ng, kSkCols);
  const int64_t nkb = a.kg / 128, stages = cdiv(nkb, kSkWarps);
  if (!pl.tiled && !a.offsets && stages > 1 && 2 * ctas < sm_count()) {
    pl.need.floats = nkb * (a.kind == GemmWeightKind::kFp4 ? 4 : 1) * a.rows * a.n;
    pl.need.counters = ctas;
    if (a.partial && a.counters && a.partial_floats >= pl.need.floats && a.counter_count >= ctas) pl.splits = stages;
  }
  return pl;
}

}  // namespace

void quantize_act(const uint16_t* x, int64_t rows, int64_t k, int64_t x_stride, uint8_t* codes, float* scales,
                  int64_t scale_ld, cudaStream_t stream, const WeightScaleJob& ws) {
  if (x_stride == 0) x_stride = k;
  DSV4_CUDA_REQUIRE(k > 0 && k % 128 == 0, "quantize_act: K must be a positive multiple of 128");
  DSV4_CUDA_REQUIRE(rows >= 0 && x_stride >= k && scale_ld >= rows, "quantize_act: bad strides");
  DSV4_CUDA_REQUIRE(aligned(codes, 4), "quantize_act: codes must be 4-byte aligned");
  DSV4_CUDA_REQUIRE(!ws.scale || ws.out, "quantize_act: weight scales need an output");
  if (rows == 0) return;
  constexpr int kThreads = 256;
  const int64_t ws_count = ws.scale ? cdiv(ws.n, 128) * weight_scale_ld(ws.k) : 0;
  const int64_t threads = rows * (k / 128) * kWarp + ws_count;
  const auto grid = static_cast<unsigned>(cdiv(threads, kThreads));
  launch_kernel(quantize_act_kernel, grid, kThreads, 0, stream, x, rows, k, x_stride, codes, scales, scale_ld, ws);
}

namespace {

// Where a block-scaled GEMM runs, decided once: exact_block_gemm dispatches on it.
enum class Route { kImma, kImmaSkinny, kFp8Gemv, kFp4Gemv, kSimt };

// Whether the route's kernel takes a pair (w1 / w3) in one launch; the others run its halves in turn.
// The FP8 GEMV never sees one (fp8_gemv_applies refuses pairs).
bool pair_in_one_launch(Route route) { return route == Route::kImmaSkinny || route == Route::kFp4Gemv; }
struct Routing {
  Route route = Route::kSimt;
  BlockPlan plan;
  ExactBlockArgs args;  // a, without split-K scratch where the plan does not split
};

Routing route_block(const ExactBlockArgs& a, const GemmPolicy& policy) {
  Routing r;
  r.args = a;
  if (!a.x && imma_wanted(a.kind, a.offsets ? cdiv(a.rows, a.experts) : a.rows, a.kg, a.offsets ? 0 : a.n, policy)) {
    r.route = Route::kImma;
    return r;
  }
  if (imma_skinny_applies(a, policy)) {
    r.route = Route::kImmaSkinny;
    r.args.partial = nullptr;
    return r;
  }
  r.plan = plan_block(a);
  const bool one_row = !r.plan.tiled && r.plan.tm == 1;
  if (one_row && fp8_gemv_applies(a)) {
    r.route = Route::kFp8Gemv;  // before split-K: the GEMV splits K across its warps instead
    r.args.partial = nullptr;
    return r;
  }
  if (r.plan.splits == 1) r.args.partial = nullptr;
  if (one_row && r.plan.splits == 1 && fp4_gemv_applies(r.args)) r.route = Route::kFp4Gemv;
  return r;
}

// The two halves of a pair as calls of their own.
void run_halves(const ExactBlockArgs& a, const GemmPolicy& policy, cudaStream_t stream) {
  ExactBlockArgs first = a, second = a;
  first.w_b = second.w_b = nullptr;
  first.w_scale_b = second.w_scale_b = nullptr;
  first.w_list_b = second.w_list_b = nullptr;
  first.w_scale_list_b = second.w_scale_list_b = nullptr;
  first.y_b = second.y_b = nullptr;
  second.w = a.w_b;
  second.w_scale = a.w_scale_b;
  second.w_list = a.w_list_b;
  second.w_scale_list = a.w_scale_list_b;
  second.y = a.y_b;
  exact_block_gemm(first, policy, stream);
  exact_block_gemm(second, policy, stream);
}

}  // namespace

// Only the SIMT kernels split K, and the FP4 GEMV takes a one-row call only when its plan does not:
// the plan's scratch, unless another kernel takes the call.
SplitNeed exact_block_split_need(const ExactBlockArgs& a, const GemmPolicy& policy) {
  if (a.rows <= 0 || a.kg % 128 != 0 || a.ng <= 0) return {};
  const Routing r = route_block(a, policy);
  return r.route == Route::kSimt || r.route == Route::kFp4Gemv ? r.plan.need : SplitNeed{};
}

void exact_block_gemm(const ExactBlockArgs& a, const GemmPolicy& policy, cudaStream_t stream) {
  DSV4_CUDA_REQUIRE(a.kind == GemmWeightKind::kFp8 || a.kind == GemmWeightKind::kFp4,
                    "exact_block_gemm: the weight must be FP8 or FP4");
  DSV4_CUDA_REQUIRE(a.kg > 0 && a.kg % 128 == 0, "exact_block_gemm: K must be a positive multiple of 128");
  DSV4_CUDA_REQUIRE(a.groups >= 1 && a.ng > 0 && a.ng * a.groups == a.n, "exact_block_gemm: bad groups");
  if (a.x) {
    DSV4_CUDA_REQUIRE(!a.offsets && a.x_ld >= a.groups * a.kg && a.x_ld % 8 == 0 && aligned(a.x, 16),
                      "exact_block_gemm: bf16 input must be 16-byte aligned rows (dense GEMMs only)");
  } else {
    DSV4_CUDA_REQUIRE(a.codes_ld >= a.groups * a.kg && a.codes_ld % 16 == 0 && aligned(a.codes, 16),
                      "exact_block_gemm: activation codes must be 16-byte aligned rows");
    DSV4_CUDA_REQUIRE(a.scale_ld >= a.rows, "exact_block_gemm: bad scale stride");
  }
  DSV4_CUDA_REQUIRE(a.y_ld >= a.n, "exact_block_gemm: bad output stride");
  if (a.offsets) {
    DSV4_CUDA_REQUIRE(a.experts > 0 && a.w_list && a.w_scale_list, "grouped_gemm: missing expert arrays");
  } else {
    DSV4_CUDA_REQUIRE(a.w && a.w_scale && aligned(a.w, 16), "exact_block_gemm: weight must be 16-byte aligned");
  }
  DSV4_CUDA_REQUIRE(!a.y_b == (a.offsets ? !a.w_list_b || !a.w_scale_list_b : !a.w_b || !a.w_scale_b),
                    "exact_block_gemm: a pair needs its weights and its output");
  if (a.rows <= 0) return;
  const Routing r = route_block(a, policy);
  if (a.y_b && !pair_in_one_launch(r.route)) {
    run_halves(a, policy, stream);
    return;
  }
  const ExactBlockArgs& p = r.args;
  switch (r.route) {
    case Route::kImma:
      imma_block_gemm(p, stream);
      return;
    case Route::kImmaSkinny:
      DSV4_CUDA_REQUIRE(imma_skinny_gemm(p, policy, stream),
                        "exact_block_gemm: the few-row tensor-core kernel refused its route");
      return;
    case Route::kFp8Gemv:
      DSV4_CUDA_REQUIRE(fp8_gemv(p, stream), "exact_block_gemm: the FP8 GEMV refused its route");
      return;
    case Route::kFp4Gemv:
      DSV4_CUDA_REQUIRE(fp4_gemv(p, stream), "exact_block_gemm: the FP4 GEMV refused its route");
      return;
    case Route::kSimt:
      break;
  }
  if (a.kind == GemmWeightKind::kFp8) {
    launch_block<GemmWeightKind::kFp8>(p, r.plan.tiled, r.plan.tm, r.plan.splits, stream);
  } else {
    launch_block<GemmWeightKind::kFp4>(p, r.plan.tiled, r.plan.tm, r.plan.splits, stream);
  }
}

void exact_plain_gemm(const ExactPlainArgs& a, cudaStream_t stream) {
  DSV4_CUDA_REQUIRE(a.kg > 0 && a.groups >= 1 && a.ng > 0 && a.ng * a.groups == a.n, "exact_plain_gemm: bad shape");
  DSV4_CUDA_REQUIRE(a.x_ld >= a.groups * a.kg && a.y_ld >= a.n, "exact_plain_gemm: bad strides");
  DSV4_CUDA_REQUIRE(!a.w_b == !a.y_b, "exact_plain_gemm: a pair needs both its weight and its output");
  if (a.rows <= 0) return;
  const bool vec = aligned(a.x, 16) && aligned(a.w, 16) && aligned(a.w_b, 16) && a.x_ld % 8 == 0 && a.kg % 8 == 0;
  const bool tiled = pick_tiled(a.rows, cdiv(a.rows, kTlRows) * a.groups * cdiv(a.ng, kTlCols));
  if (a.w_f32) {
    launch_plain<true>(a, tiled, vec, stream);
  } else {
    launch_plain<false>(a, tiled, vec, stream);
  }
}

void grouped_gemm(const GroupedGemmArgs& a, const GemmPolicy& policy, cudaStream_t stream) {
  DSV4_CUDA_REQUIRE(a.experts > 0 && a.offsets && a.w_data && a.w_scale && a.y, "grouped_gemm: missing arguments");
  ExactBlockArgs p;
  p.kind = a.kind;
  p.codes = a.a_codes;
  p.codes_ld = a.k;
  p.scales = a.a_scales;
  p.scale_ld = a.scale_ld;
  p.rows = a.rows;
  p.n = a.n;
  p.ng = a.n;
  p.kg = a.k;
  p.w_list = a.w_data;
  p.w_scale_list = a.w_scale;
  p.offsets = a.offsets;
  p.experts = a.experts;
  p.y = a.y;
  p.y_ld = a.y_ld ? a.y_ld : a.n;
  p.a_digits = a.a_digits;
  p.a_digit_stride = a.a_digit_stride;
  p.w_list_b = a.w_data_b;
  p.w_scale_list_b = a.w_scale_b;
  p.y_b = a.y_b;
  exact_block_gemm(p, policy, stream);
}

}  // namespace dsv4::cuda
