// Few-row FP4 GEMMs on the int8 tensor cores, weights as the MMA's row operand (gemm_imma_skinny.h).
//
// A CTA owns one tile of up to eight activation rows (of one expert, grouped) and 4 x 64 output
// columns; each warp streams its 64 weight rows through a private ring of 128-wide K stages
// (cp.async, the next stage copied while one is multiplied) together with the tile's digit planes
// and the rows' block scales, so no CTA barrier runs inside the K loop. Per 32-wide K block a warp
// converts its weight fragments to int8 (byte permutes), multiplies each against the three digit
// planes (m16n8k32, int32: exact), and every lane folds its four outputs: the exact block sum,
// rounded to fp32 once, times the activation's and the weight's scales, added to its chain in
// ascending K from +0, as gemm_imma.cu does.
//
// The K order inside an MMA is free as long as both operands agree, and it stays inside one 32-wide
// block: lane (g, t) feeds k slots 4t..4t+3 and 16+4t..16+4t+3 with elements 8t..8t+7, which is one
// 32-bit word of packed e2m1 codes (ldmatrix hands out exactly that word) and eight contiguous bytes
// of a digit row.
#include <cuda_runtime.h>

#include <atomic>
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm_imma.h"
#include "backend/cuda/gemm_imma_skinny.h"
#include "backend/cuda/gemm_tiles.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/ptx.cuh"

namespace dsv4::cuda {
namespace {

using namespace gemm_tiles;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarp;
constexpr int kTileRows = 8;            // activation rows of a tile: one n8 fragment per digit plane
constexpr int kFrags = 4;               // m16 fragments (16 output columns each) of a warp
constexpr int kWarpCols = 16 * kFrags;  // a warp's output columns
constexpr int kCtaCols = kWarps * kWarpCols;
// Stages of a warp's ring, one 128-wide K block each: a stage's products take far longer than its
// copies, so one stage in flight hides the DRAM latency, and two stages leave room for three CTAs an SM
// (12 warps; with three stages two fit, and half the cycles had no eligible warp: Nsight Compute).
constexpr int kRing = 2;
constexpr int kPlanes = 3;
constexpr int kMaxKb = static_cast<int>(kImmaSkinnyMaxK / 128);

// One stage of a warp: its weight rows' 64 bytes (four 32-wide blocks of e2m1 codes, 16-byte units
// swizzled so that an ldmatrix phase's eight rows hit eight bank groups), the tile rows' digits by
// block, plane and row, and each weight row's four ue8m0 block scales.
struct Stage {
  alignas(16) uint8_t w[kWarpCols][64];
  alignas(16) int8_t a[4][kPlanes][kTileRows][32];
  uint32_t s[kWarpCols];
};
struct Smem {
  Stage ring[kWarps][kRing];
};

__device__ __forceinline__ int unit_at(int row, int unit) { return unit ^ ((row >> 1) & 3); }

// Whether a word of ue8m0 scales holds a 0 or a 255 (2^-127 and NaN, which a shift does not make).
__device__ __forceinline__ bool special_scales(uint32_t w) {
  return (((w - 0x01010101u) & ~w) | ((~w - 0x01010101u) & w)) & 0x80808080u;
}

// Block scale sb (0-3) of a word as a float: by a shift when no scale of the warp's stage is special.
template <bool kPlain>
__device__ __forceinline__ float block_scale(uint32_t w, int sb) {
  if constexpr (kPlain) {
    return __uint_as_float(prmt(w, 0u, 0x0444u | (static_cast<uint32_t>(sb) << 12)) >> 1);
  } else {
    return ue8m0_f((w >> (8 * sb)) & 255u);
  }
}

__global__ void __launch_bounds__(kThreads, 3) imma_skinny_kernel(const ExactBlockArgs p) {
  pdl_enter();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ float sa[kTileRows][kMaxKb];  // activation scales by row and 128-block (NaN: a NaN code)
  Stage* ring = reinterpret_cast<Smem*>(smem_raw)->ring[threadIdx.x / kWarp];
  Tile t;
  if (!row_tile(p, kTileRows, t)) return;
  // The column tiles of every group, then (a pair) those of the second weight.
  const int64_t col_tiles = cdiv(p.ng, kCtaCols), half = p.groups * col_tiles;
  const bool second = blockIdx.y >= half;
  const int64_t tile = blockIdx.y - (second ? half : 0), g = tile / col_tiles;
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  const int gid = lane / 4, tig = lane % 4;
  const int64_t c0 = (tile % col_tiles) * kCtaCols + warp * kWarpCols;  // the warp's first column in g
  const int cols = static_cast<int>(imin(kWarpCols, p.ng - c0));        // its valid columns (may be <= 0)
  const void* wv = p.offsets ? (second ? p.w_list_b : p.w_list)[t.e] : (second ? p.w_b : p.w);
  const uint8_t* ws =
      p.offsets ? (second ? p.w_scale_list_b : p.w_scale_list)[t.e] : (second ? p.w_scale_b : p.w_scale);
  const int64_t row_bytes = p.kg / 2, scale_row = p.kg / 32, n0 = g * p.ng + c0;
  const auto* w0 = static_cast<const uint8_t*>(wv) + n0 * row_bytes;
  const uint8_t* s0 = ws + n0 * scale_row;
  const int8_t* d0 = p.a_digits + t.r0 * p.codes_ld + g * p.kg;
  const int nkb = static_cast<int>(p.kg / 128);

  // Stage kb of the warp's ring: 256 weight pieces and 192 digit pieces of 16 bytes, 64 scale words.
  auto issue = [&](int kb, Stage& st) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int piece = lane + kWarp * i, r = piece / 4, u = piece % 4;
      const int rs = r < cols ? r : cols - 1;
      cp_async<16>(&st.w[r][unit_at(r, u) * 16], w0 + rs * row_bytes + kb * 64 + u * 16, r < cols ? 16 : 0);
    }
#pragma unroll
    for (int i = 0; i < 6; ++i) {
      const int piece = lane + kWarp * i, h = piece % 2, r = (piece / 2) % kTileRows;
      const int pl = (piece / 16) % kPlanes, sb = piece / 48;
      const int rs = r < t.cnt ? r : 0;
      cp_async<16>(&st.a[sb][pl][r][h * 16], d0 + pl * p.a_digit_stride + rs * p.codes_ld + kb * 128 + sb * 32 + h * 16,
                   r < t.cnt ? 16 : 0);
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = lane + kWarp * i, rs = r < cols ? r : cols - 1;
      cp_async<4>(&st.s[r], s0 + rs * scale_row + kb * 4, r < cols ? 4 : 0);
    }
  };
  if (cols > 0) {
    for (int s = 0; s < kRing - 1; ++s) {
      if (s < nkb) issue(s, ring[s]);
      cp_async_commit();
    }
  }

  // The tile rows' activation scales, then NaN for any 128-block holding a NaN code (the reference's
  // products are NaN there, and so is 0 times a NaN scale). Overlaps the first stages' copies.
  bool scalable = true;  // every scale times 2^-10 exactly (not below 2^-116 unless zero)
  for (int i = static_cast<int>(threadIdx.x); i < kTileRows * nkb; i += kThreads) {
    const int r = i / nkb, kb = i % nkb;
    const float s = r < t.cnt ? __ldg(p.scales + (g * nkb + kb) * p.scale_ld + t.r0 + r) : 0.0f;
    scalable &= !(s != 0.0f && fabsf(s) < 0x1p-116f);
    sa[r][kb] = s;
  }
  scalable = __syncthreads_and(scalable) != 0;
  const int pieces = static_cast<int>(p.kg / 16);
  for (int q = static_cast<int>(threadIdx.x); q < t.cnt * pieces; q += kThreads) {
    const int r = q / pieces, i = q % pieces;
    const uint4 c = __ldg(reinterpret_cast<const uint4*>(p.codes + (t.r0 + r) * p.codes_ld + g * p.kg + i * 16));
    if (any_nan4(c.x) || any_nan4(c.y) || any_nan4(c.z) || any_nan4(c.w)) sa[r][i / 8] = __int_as_float(0x7fffffff);
  }
  __syncthreads();
  if (cols <= 0) return;

  float C[kFrags][4] = {};  // [fragment][(row g, 8 + g) x (tile row 2t, 2t + 1)]
  // plain: no special weight scale in the stage and every activation scale scalable, so that the
  // block scales are shifts and the exact 2^-10 of a block's value moves into the activation's scale:
  // (S·2^-10)·a rounds as S·(a·2^-10) does when both products are the same real number.
  auto multiply = [&](int kb, const Stage& st, const uint32_t(&sw)[kFrags][2], auto plain) {
    constexpr bool kPlain = decltype(plain)::value;
    float as[2] = {sa[2 * tig][kb], sa[2 * tig + 1][kb]};
    if constexpr (kPlain) as[0] = __fmul_rn(as[0], 0x1p-10f), as[1] = __fmul_rn(as[1], 0x1p-10f);
#pragma unroll 1
    for (int jp = 0; jp < 2; ++jp) {  // blocks 2jp and 2jp + 1
      uint2 b[2][kPlanes];
#pragma unroll
      for (int jj = 0; jj < 2; ++jj) {
#pragma unroll
        for (int pl = 0; pl < kPlanes; ++pl) {
          b[jj][pl] = *reinterpret_cast<const uint2*>(&st.a[2 * jp + jj][pl][gid][tig * 8]);
        }
      }
#pragma unroll
      for (int f = 0; f < kFrags; ++f) {
        uint32_t A[4];  // rows g, g + 8 of block 2jp, then of block 2jp + 1
        const int m = lane / 8, r = 16 * f + lane % 8 + (m % 2) * 8, u = 2 * jp + m / 2;
        ldsm_x4(smem_addr(&st.w[r][unit_at(r, u) * 16]), A);
#pragma unroll
        for (int jj = 0; jj < 2; ++jj) {
          const int sb = 2 * jp + jj;
          const uint2 lo = e2m1x8_int8(A[2 * jj]), hi = e2m1x8_int8(A[2 * jj + 1]);
          const uint32_t af[4] = {lo.x, hi.x, lo.y, hi.y};
          int acc[kPlanes][4];
#pragma unroll
          for (int pl = 0; pl < kPlanes; ++pl) mma_s8_zero(acc[pl], af, b[jj][pl].x, b[jj][pl].y);
          const float bs[2] = {block_scale<kPlain>(sw[f][0], sb), block_scale<kPlain>(sw[f][1], sb)};
#pragma unroll
          for (int i = 0; i < 4; ++i) {  // |sum| < 2^27: int32; the block's value is sum·2^-10
            const int sum = acc[0][i] + acc[1][i] * 128 + acc[2][i] * 16384;
            const float P = kPlain ? __int2float_rn(sum) : __fmul_rn(__int2float_rn(sum), 0x1p-10f);
            C[f][i] = __fadd_rn(C[f][i], __fmul_rn(__fmul_rn(P, as[i % 2]), bs[i / 2]));
          }
        }
      }
    }
  };
  for (int kb = 0; kb < nkb; ++kb) {
    // Stage kb has landed (this lane's copies) and every lane is done with stage kb - 1, whose buffer
    // the copies of stage kb + kRing - 1 take.
    cp_async_wait<kRing - 2>();
    __syncwarp();
    const int ahead = kb + kRing - 1;
    if (ahead < nkb) issue(ahead, ring[ahead % kRing]);
    cp_async_commit();
    const Stage& st = ring[kb % kRing];
    uint32_t sw[kFrags][2];
    bool special = false;
#pragma unroll
    for (int f = 0; f < kFrags; ++f) {
      sw[f][0] = st.s[16 * f + gid];
      sw[f][1] = st.s[16 * f + gid + 8];
      special |= special_scales(sw[f][0]) || special_scales(sw[f][1]);
    }
    if (__any_sync(kFull, special) || !scalable) {
      multiply(kb, st, sw, std::false_type{});
    } else {
      multiply(kb, st, sw, std::true_type{});
    }
  }
  void* y = second ? p.y_b : p.y;
#pragma unroll
  for (int f = 0; f < kFrags; ++f) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int col = 16 * f + gid + (i / 2) * 8, r = 2 * tig + i % 2;
      if (col < cols && r < t.cnt) store_out(y, p.y_ld, p.y_f32, t.r0 + r, n0 + col, C[f][i]);
    }
  }
}

std::atomic<int64_t> g_launches{0};

}  // namespace

int64_t imma_skinny_launches() { return g_launches.load(); }

bool imma_skinny_takes(GemmWeightKind kind, int64_t rows_per_weight, int64_t kg, const GemmPolicy& policy) {
  return policy.exact_imma && kind == GemmWeightKind::kFp4 && rows_per_weight >= 2 &&
         rows_per_weight < policy.imma_min_rows && kg > 0 && kg % 128 == 0 && kg <= kImmaSkinnyMaxK;
}

bool imma_skinny_applies(const ExactBlockArgs& a, const GemmPolicy& policy) {
  const int64_t per_weight = a.offsets ? cdiv(a.rows, a.experts) : a.rows;
  if (!imma_skinny_takes(a.kind, per_weight, a.kg, policy) || a.x || !a.codes || !a.scales || !a.a_digits) {
    return false;
  }
  if (!aligned_to(a.codes, 16) || a.codes_ld % 16 != 0 || !aligned_to(a.a_digits, 16) || a.a_digit_stride % 16 != 0) {
    return false;
  }
  // Grouped calls only (the routed experts, whose weights are whole allocations, hence aligned): no
  // dense FP4 call comes with digit planes.
  return a.offsets != nullptr;
}

bool imma_skinny_gemm(const ExactBlockArgs& a, const GemmPolicy& policy, cudaStream_t stream) {
  if (!imma_skinny_applies(a, policy)) return false;
  constexpr size_t kSmem = sizeof(Smem);
  allow_dynamic_smem(imma_skinny_kernel, kSmem);
  const int64_t tiles = row_tiles(a.rows, kTileRows, a.offsets ? a.experts : 0);
  const int64_t cols = (a.y_b ? 2 : 1) * a.groups * cdiv(a.ng, kCtaCols);
  DSV4_CUDA_REQUIRE(tiles < (int64_t{1} << 31) && cols <= 65535, "imma skinny gemm: grid out of range");
  launch_kernel(imma_skinny_kernel, dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(cols)), kThreads, kSmem,
                stream, a);
  g_launches.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace dsv4::cuda
