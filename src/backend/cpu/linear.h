// CPU linear (MODEL.md §9.3): block-scaled FP8/FP4 GEMMs with the reference's activation
// quantization, and plain fp32 GEMMs for bf16/f32 weights.
//
// Summation order, fixed per output element: within a K-block (128 for FP8 and plain weights, 32
// for FP4) the products are added one after another in ascending k into an fp32 partial; FP8/FP4
// partials are then scaled and added to the fp32 accumulator in ascending block order, plain
// weights add straight into the accumulator. Work is split over (64-row chunks × 32-column tiles),
// so neither the batch nor the thread count changes any element's arithmetic.
#pragma once

#include "backend/ops.h"
#include "core/thread_pool.h"

namespace dsv4::cpu {

// Runs a validated LinearParams.
void linear(ThreadPool& pool, const LinearParams& p);

}  // namespace dsv4::cpu
