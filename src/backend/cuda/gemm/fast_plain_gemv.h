// The fast tier's plain GEMM for few rows (decode): fp32 or bf16 weights, bf16 rows, fp32 outputs or
// bf16, a pair in one launch (the compressor's wkv and wgate, the MoE gate). Each output is one fp32
// sum in a fixed order (spec/NUMERICS.md "fast": fp32 accuracy in any fixed order): lane l of the
// output's warp chains fused multiply-adds over its K slices (8 values at 8l + 256j, ascending j),
// and the 32 chains add in a fixed butterfly. The exact tier's one sequential chain a column is
// latency-bound at few rows (4,096 dependent adds); here a warp reads its weight row in 32 slices.
#pragma once

#include <cuda_runtime_api.h>

#include "backend/cuda/gemm_internal.h"

namespace dsv4::cuda {

// Rows a call may have.
constexpr int64_t kFastPlainGemvMaxRows = 8;

// Whether the kernel takes the call: at most kFastPlainGemvMaxRows rows, K % 8 == 0, 16-byte aligned x
// (x_ld % 8 == 0) and weights (a pair alike); groups (column c reads group c / ng's K columns of x);
// a bf16 weight's FP8 twin (a.w_fp8 16-byte aligned: then K and ng multiples of 128, no pair), read
// instead of its bf16 bytes: the same products, summed a 128-wide scale block at a time.
bool fast_plain_gemv_takes(const ExactPlainArgs& a);

// Runs `a` (and its pair, in the same launch), k_parts (1, 2, 4 or 8; 1 for a twin) warps a column, each
// chaining every k_parts-th of its 256-wide K slices (GemmPlan::plain_k_parts).
void fast_plain_gemv(const ExactPlainArgs& a, int k_parts, cudaStream_t stream);

}  // namespace dsv4::cuda
