// Device work of the cuBLASLt-per-expert route (lt_experts.h).
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm/fp4_shift.h"
#include "backend/cuda/gemm/lt_experts.h"
#include "backend/cuda/gemm_tiles.cuh"
#include "backend/cuda/launch.cuh"

namespace dsv4::cuda {
namespace {

using gemm_tiles::cdiv;

constexpr int kRowsPerBlock = 128;  // a CTA: one 128x128 block, a thread a row

// The block's largest and smallest scale bytes over its 128 rows x 4 sub-blocks (every thread gets both).
__device__ __forceinline__ int2 block_scale_range(uint32_t sw) {
  __shared__ int top[kRowsPerBlock / 32], low[kRowsPerBlock / 32];
  const int e0 = sw & 255u, e1 = (sw >> 8) & 255u, e2 = (sw >> 16) & 255u, e3 = sw >> 24;
  const unsigned t = __reduce_max_sync(0xffffffffu, static_cast<unsigned>(max(max(e0, e1), max(e2, e3))));
  const unsigned l = __reduce_min_sync(0xffffffffu, static_cast<unsigned>(min(min(e0, e1), min(e2, e3))));
  if (threadIdx.x % 32 == 0) top[threadIdx.x / 32] = static_cast<int>(t), low[threadIdx.x / 32] = static_cast<int>(l);
  __syncthreads();
  int2 r{top[0], low[0]};
#pragma unroll
  for (int w = 1; w < kRowsPerBlock / 32; ++w) r.x = max(r.x, top[w]), r.y = min(r.y, low[w]);
  return r;
}

// Whether the block re-encodes exactly (lt_experts.h): a span of at most kLtExpertSpan octaves, no NaN
// byte, and a normal fp32 scale 2^(top − 6 − 127).
__device__ __forceinline__ bool block_exact(int2 range) {
  return range.x != 255 && range.x - range.y <= kLtExpertSpan && range.x - 6 >= 1;
}

// Expert e's weight and scale bytes (half 1: the pair's), or null when e has no rows.
struct ExpertWeight {
  const uint8_t* w = nullptr;
  const uint8_t* ws = nullptr;
};
__device__ __forceinline__ ExpertWeight expert_weight(const ExactBlockArgs& p, int e, int half, bool any = false) {
  if (!any && p.offsets[e + 1] == p.offsets[e]) return {};
  return {static_cast<const uint8_t*>((half ? p.w_list_b : p.w_list)[e]),
          (half ? p.w_scale_list_b : p.w_scale_list)[e]};
}

// grid (K blocks, row blocks, experts x halves); all_experts: rows or not.
__global__ void span_check_kernel(const ExactBlockArgs p, int32_t* flag, bool all_experts) {
  pdl_enter();
  const int e = static_cast<int>(blockIdx.z) % p.experts, half = static_cast<int>(blockIdx.z) / p.experts;
  const ExpertWeight w = expert_weight(p, e, half, all_experts);
  if (!w.w) return;
  const int64_t r = int64_t{blockIdx.y} * kRowsPerBlock + threadIdx.x;
  const uint32_t sw = *reinterpret_cast<const uint32_t*>(w.ws + r * (p.kg / 32) + blockIdx.x * 4);
  if (!block_exact(block_scale_range(sw)) && threadIdx.x == 0) *flag = 1;
}

// grid (K blocks, row blocks, count x halves): one 128x128 block of one weight slot. Thread t reads row
// t's scale word for the block's range, then re-encodes sub-block t % 4 of rows t / 4 + 32i by its table
// (fp4_shift.h): a warp's loads and stores cover eight rows' contiguous bytes.
__global__ void widen_kernel(const ExactBlockArgs p, int first, int count, uint8_t* wide, float* scales,
                             bool all_experts) {
  pdl_enter();
  __shared__ uint32_t row_scales[kRowsPerBlock];
  const int j = static_cast<int>(blockIdx.z), e = first + j % count, half = j / count;
  const int slot = (j % count) * static_cast<int>(gridDim.z / count) + half;  // an expert's halves side by side
  const ExpertWeight w = expert_weight(p, e, half, all_experts);
  if (!w.w) return;
  const int64_t kb = blockIdx.x, rb = blockIdx.y;
  const uint32_t sw =
      *reinterpret_cast<const uint32_t*>(w.ws + (rb * kRowsPerBlock + threadIdx.x) * (p.kg / 32) + kb * 4);
  row_scales[threadIdx.x] = sw;
  const int top = block_scale_range(sw).x - 6;  // exact blocks only (span_check_kernel ran first); it syncs
  const int64_t ld = weight_scale_ld(p.kg);
  if (threadIdx.x == 0) scales[(slot * (p.n / 128) + rb) * ld + kb] = __int_as_float(top << 23);
  const int u = static_cast<int>(threadIdx.x % 4);  // 16 bytes of codes: sub-block u, scale byte u
#pragma unroll
  for (int i = 0; i < kRowsPerBlock / 32; ++i) {
    const int row = static_cast<int>(threadIdx.x / 4) + 32 * i;
    const int64_t r = rb * kRowsPerBlock + row;
    const uint4 v = *reinterpret_cast<const uint4*>(w.w + r * (p.kg / 2) + kb * 64 + 16 * u);
    const Fp8Table t = e4m3_table(static_cast<int>((row_scales[row] >> (8 * u)) & 255u) - top);
    const HalfWords c0 = e2m1x8_by_table(v.x, t), c1 = e2m1x8_by_table(v.y, t);
    const HalfWords c2 = e2m1x8_by_table(v.z, t), c3 = e2m1x8_by_table(v.w, t);
    uint4* dst = reinterpret_cast<uint4*>(wide + (slot * p.n + r) * p.kg + kb * 128 + 32 * u);
    dst[0] = uint4{c0.lo, c0.hi, c1.lo, c1.hi};
    dst[1] = uint4{c2.lo, c2.hi, c3.lo, c3.hi};
  }
}

// A thread a (K block, routed row): its scale copied into each piece of its expert that holds the row.
__global__ void regroup_kernel(const float* scales, int64_t scale_ld, int64_t kblocks, int64_t rows,
                               const int32_t* offsets, int experts, float* out) {
  pdl_enter();
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= kblocks * rows) return;
  const int64_t kb = i / rows, r = i % rows;
  if (r >= offsets[experts]) return;
  const int lo = gemm_tiles::expert_of_row(offsets, experts, r);  // r lies in its rows
  const int64_t first = offsets[lo], at = r - first, base = lt_expert_scale_base(kblocks, first, lo);
  const LtPieces pieces = lt_expert_pieces(offsets[lo + 1] - first, kblocks);
  const float v = scales[kb * scale_ld + r];
  for (int p = 0; p < pieces.count; ++p) {
    const LtPiece& x = pieces.piece[p];
    if (at >= x.first && at < x.first + x.rows) out[base + x.scale_offset + kb * x.rows + (at - x.first)] = v;
  }
}

void require_call(const ExactBlockArgs& a) {
  DSV4_CUDA_REQUIRE(a.kind == GemmWeightKind::kFp4 && a.offsets && a.experts > 0 && a.n % 128 == 0 && a.kg % 128 == 0,
                    "lt_experts: a grouped FP4 call with N and K multiples of 128");
}

}  // namespace

void lt_expert_span_check(const ExactBlockArgs& a, int32_t* flag, cudaStream_t stream, bool all_experts) {
  DSV4_CUDA_REQUIRE(a.kind == GemmWeightKind::kFp4 && (a.offsets || all_experts) && a.experts > 0 && a.n % 128 == 0 &&
                        a.kg % 128 == 0,
                    "lt_expert_span_check: a grouped FP4 call with N and K multiples of 128");
  const dim3 grid(static_cast<unsigned>(a.kg / 128), static_cast<unsigned>(a.n / 128),
                  static_cast<unsigned>(a.experts * (has_pair(a) ? 2 : 1)));
  launch_kernel(span_check_kernel, grid, dim3(kRowsPerBlock), 0, stream, a, flag, all_experts);
}

void lt_expert_widen(const ExactBlockArgs& a, int first, int count, uint8_t* wide, float* scales, cudaStream_t stream,
                     bool all_experts) {
  require_call(a);
  DSV4_CUDA_REQUIRE(first >= 0 && count >= 1 && first + count <= a.experts && wide && scales,
                    "lt_expert_widen: a range of the call's experts and its scratch");
  const dim3 grid(static_cast<unsigned>(a.kg / 128), static_cast<unsigned>(a.n / 128),
                  static_cast<unsigned>(count * (has_pair(a) ? 2 : 1)));
  launch_kernel(widen_kernel, grid, dim3(kRowsPerBlock), 0, stream, a, first, count, wide, scales, all_experts);
}

void lt_expert_regroup_scales(const ExactBlockArgs& a, float* out, cudaStream_t stream) {
  require_call(a);
  const int64_t kblocks = a.kg / 128, threads = kblocks * a.rows;
  if (threads == 0) return;
  launch_kernel(regroup_kernel, static_cast<unsigned>(cdiv(threads, 256)), dim3(256), 0, stream, a.scales, a.scale_ld,
                kblocks, a.rows, a.offsets, a.experts, out);
}

}  // namespace dsv4::cuda
