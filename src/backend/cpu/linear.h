// CPU linear (MODEL.md §9.3): block-scaled FP8/FP4 GEMMs with the reference's activation
// quantization, and plain fp32 GEMMs for bf16/f32 weights.
//
// Summation order, fixed per output element. FP8/FP4: per K-block (128 for FP8, 32 for FP4) the
// block sum P is the exact sum of the block's products of unscaled values (e4m3 x e4m3 or e2m1 x e4m3
// products are multiples of 2^-18 below 2^18 in magnitude, so up to 128 of them sum exactly in fp64,
// in any order), rounded once to fp32 (nearest even); then C += P·(sa·sb) (FP8) or C += (P·sa)·sb
// (FP4) into the fp32 accumulator in ascending block order. Plain (bf16/f32) weights: one fp32 sum
// over all of K, products added one after another in ascending k. Work is split over (64-row chunks
// × 32-column tiles), so neither the batch nor the thread count changes any element's arithmetic.
#pragma once

#include "backend/ops.h"
#include "core/thread_pool.h"

namespace dsv4::cpu {

// Runs a validated LinearParams.
void linear(ThreadPool& pool, const LinearParams& p);

}  // namespace dsv4::cpu
