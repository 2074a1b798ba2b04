// The fast tier's block-scaled GEMM for few rows a weight (decode): FP8 and FP4 weights, dense or
// grouped by expert, a pair in one launch; bound by reading the weight once.
//
// Arithmetic as fast_mma.h (spec/NUMERICS.md "fast"): the tensor cores sum each 128-wide K block
// (FP8) or 32-wide block (FP4, codes widened exactly to e4m3) into a fresh fp32 fragment, promoted
// into the accumulator with both scales, blocks in ascending K; the CTA's warps each own a run of K
// blocks and their sums are added in K order at the end (the same bits run to run). FP4 per 32: one
// re-encoded e5m2 block a 128 (the wgmma kernel's form) measured slower here (docs/perf.md).
//
// Layout: a warp owns 16 weight rows (the MMA's 16-row operand) and a tile of up to 8 activation rows
// (its 8-column operand). The K order inside one MMA is free as long as both operands agree, so a
// lane's two 16-byte loads of a 128-byte FP8 row block are its operand words, loaded straight into the
// registers; FP4 blocks (64 bytes a row) go by 16-byte cp.async into a ring of the warp's own in shared
// memory and reach the registers by ldmatrix (one 4-byte word of each 32-code scale block a lane).
// Four blocks of a warp's weights are in flight; no barrier runs inside the K loop, and a dense call's first
// blocks load before the wait on the previous kernel (a grouped call's too, where its offsets were settled:
// ExactBlockArgs::offsets_settled). The tile's activation codes sit in shared memory, copied, or quantized
// there from a dense call's bf16 rows (the exact quantizer's codes, without quantize_act's launch).
#pragma once

#include <cuda_runtime_api.h>

#include "backend/cuda/gemm_internal.h"

namespace dsv4::cuda {

// Activation rows of one tile; a call with more rows a weight runs more tiles (each rereads the weight).
constexpr int kFastGemvTileRows = 8;
// Shared memory a CTA may take for its tile's codes (8 rows of K): K up to about 12,000.
constexpr int64_t kFastGemvMaxSmem = 100 << 10;

// Whether the kernel takes the call: FP8 or FP4 weights with K % 128 == 0, FP8 groups of whole
// 128-row scale blocks, the tile's codes within kFastGemvMaxSmem; activation codes and scales, or
// 16-byte aligned bf16 rows (dense calls).
bool fast_gemv_takes(const ExactBlockArgs& a);

// How the kernel runs a call: the plan's kFastGemv fields.
struct GemvShape {
  int k_parts = 1;  // runs of K each CTA's eight warps split (1, 2, 4 or 8)
  int items = 1;    // column tiles a CTA runs in turn (> 1: one group, runs of whole ring turns)
};

// Runs `a` (with its pair) in that shape, four weight blocks in flight a warp.
void fast_gemv(const ExactBlockArgs& a, GemvShape shape, cudaStream_t stream);

}  // namespace dsv4::cuda
