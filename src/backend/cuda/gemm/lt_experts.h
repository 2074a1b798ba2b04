// The routed experts' FP4 GEMMs on cuBLASLt, one matmul an expert (GemmRoute::kCublasLtExperts): the
// device work around those matmuls. cuBLASLt's block-scaled FP8 GEMM takes e4m3 weights with an fp32
// scale a 128x128 block, so each expert's FP4 weight is re-encoded exactly into that form (spec/
// NUMERICS.md allows an exact per-128 re-encoding checked at load: checked once per weight list by the
// MoE, GemmRunner::fp4_experts_reencode_exactly, or here each call), and the
// activations' 1x128 scales, K-block major over all routed rows, are regrouped into each expert's own
// [K/128][round4(rows)] block, the layout cuBLASLt reads for the B operand.
//
// Exactness: a 128x128 block of e2m1 codes with e8m0 scales s (one a 32-wide sub-block) becomes e4m3
// codes c·2^(s − T) and the fp32 scale 2^(T − 127) with T = max(s) − 6: the largest code, 6·2^6 = 384,
// stays under e4m3's 448, and the smallest, 0.5·2^(min(s) − T), is representable down to e4m3's
// 2^-9 while the block's scales span at most kLtExpertSpan octaves. Wider spans (and NaN scale bytes,
// and T so small that its fp32 scale is subnormal) are found by lt_expert_span_check before any
// matmul; the runner then takes the wgmma kernel instead (its e5m2 form keeps 26 octaves).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/gemm_internal.h"

namespace dsv4::cuda {

constexpr int kLtExpertSpan = 14;

// Sets *flag (device int, left as is otherwise) when some 128x128 block of an expert with rows (every
// expert with all_experts), and of its pair's weight, cannot be re-encoded exactly. a: a grouped FP4
// call, n and kg multiples of 128 (offsets unread with all_experts).
void lt_expert_span_check(const ExactBlockArgs& a, int32_t* flag, cudaStream_t stream, bool all_experts = false);

// Re-encodes experts [first, first + count) that have rows (every one with all_experts: offsets unread),
// and their pair's weights, into weight slots:
// slot j = (e - first)·halves + h (h 1: the pair's weight; halves 2 with a pair, else 1) holds e4m3 codes
// [n][kg] at wide + j·n·kg and fp32 block scales [n/128][weight_scale_ld(kg)] at scales + j·(n/128)·ld,
// so that an expert's two weights read as one of 2n rows.
void lt_expert_widen(const ExactBlockArgs& a, int first, int count, uint8_t* wide, float* scales, cudaStream_t stream,
                     bool all_experts = false);

// Where expert e's regrouped activation scales start (floats), from its first row: room for kblocks x
// (rows + 4) floats (its pieces', gemm_plan.h lt_expert_pieces), 16-byte aligned, apart from every other
// expert's for any row counts.
__host__ __device__ inline int64_t lt_expert_scale_base(int64_t kblocks, int64_t first_row, int e) {
  return kblocks * ((first_row + 7 * int64_t{e} + 3) / 4 * 4);
}
// Floats lt_expert_regroup_scales writes at most for `rows` rows over `experts` experts.
inline int64_t lt_expert_scale_floats(int64_t kblocks, int64_t rows, int experts) {
  return lt_expert_scale_base(kblocks, rows, experts) + 4 * kblocks;
}

// scales [kblocks][scale_ld] (a.scales, a.scale_ld: the routed rows' 1x128 scales) -> each piece of each
// expert (lt_expert_pieces): [kblocks][the piece's rows] at out +
// lt_expert_scale_base(kblocks, offsets[e], e) + its scale_offset (rows past the expert's: left unwritten).
void lt_expert_regroup_scales(const ExactBlockArgs& a, float* out, cudaStream_t stream);

}  // namespace dsv4::cuda
