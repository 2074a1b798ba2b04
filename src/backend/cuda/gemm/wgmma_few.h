// The fast tier's dense FP8 GEMM of a decode batch (up to kWgmmaFewMaxRows rows) on Hopper's warpgroup
// MMA, with the operands swapped: 128 weight rows a CTA are wgmma's M (two m64 halves), the call's rows
// its N (16, 32 or 64, rows past the call zero). A row-major tile of 64 rows would leave most of its M
// empty; swapped, every multiply is whole and the weight streams through a ring four stages deep.
//
// Arithmetic (spec/NUMERICS.md "fast"): per 128-wide K block the tensor cores sum the block's products
// into a fresh fp32 fragment, promoted with both scales (acc += block · (sa · sw)); a split's blocks in
// ascending K, the splits added in split order; bf16 output rounded once.
//
// K splits (at most kWgmmaFewMaxSplits) of one 128-row tile form a thread-block cluster: each CTA leaves
// its sums in its shared memory, and after a cluster barrier every CTA adds its share of the tile's
// outputs over the splits through distributed shared memory. No workspace, no second launch.
#pragma once

#include <cuda_runtime_api.h>

#include "backend/cuda/gemm_internal.h"

namespace dsv4::cuda {

// Whether the kernel takes the call: dense FP8 codes (a.codes, not a.x) of 1 to kWgmmaFewMaxRows rows,
// one weight (no pair, one group), N and K multiples of 128, 16-byte aligned codes and weight.
bool wgmma_few_takes(const ExactBlockArgs& a);

// Runs `a` from activation codes and scales in `splits` K splits (1 to kWgmmaFewMaxSplits, at most the
// K blocks).
void wgmma_few_gemm(const ExactBlockArgs& a, int splits, cudaStream_t stream);

}  // namespace dsv4::cuda
