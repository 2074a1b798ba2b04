// Block-scaled GEMMs on the integer tensor cores, with the exact kernels' results bit for bit.
//
// The reference order (backend/cpu/linear.cpp) takes each K-block's product sum exactly, rounded
// once to fp32. An e4m3 value times 2^9 is an integer X with |X| < 2^18, so each operand splits into
// signed base-128 digits X = d0 + d1·2^7 + d2·2^14 (|d| <= 127, |d2| <= 14) that fit int8; an e2m1
// value times 2 is an integer in [-12, 12]. A block sum is then a handful of int8 x int8 tensor-core
// products with exact int32 accumulation (FP8: 3 x 3 digit pairs over 128; FP4: 3 x 1 over 32),
// combined in 64-bit integers and rounded to fp32 once, which is what the exact kernels compute on
// CUDA cores. FP8 tensor cores truncate while accumulating and are never used.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/gemm_internal.h"

namespace dsv4::cuda {

// Whether a block-scaled GEMM of this weight kind with rows_per_weight rows per weight matrix and
// K = kg goes to the tensor-core kernel (it needs activation codes, not bf16 rows), with the policy's
// exact_imma on: from policy.imma_min_rows rows (64 measured to beat the SIMT kernels from there), and
// for a dense weight of dense_n output columns (0: grouped) from kImmaDecodeRows rows where it spans
// kImmaDecodeTiles column tiles.
constexpr int64_t kImmaDecodeRows = 24, kImmaDecodeTiles = 96;
bool imma_wanted(GemmWeightKind kind, int64_t rows_per_weight, int64_t kg, int64_t dense_n, const GemmPolicy& policy);

// The GEMM of exact_block_gemm (codes input only, dense or grouped), on the tensor cores, a K stage
// copied and converted while the one before it is multiplied (four stages in a cp.async ring measured
// 10% slower on the MoE: docs/perf-history.md, session 10).
void imma_block_gemm(const ExactBlockArgs& a, cudaStream_t stream);

// The three digit planes of e4m3 codes [rows][ld] (the first k of each row, k % 16 == 0, 16-byte
// aligned rows): digit p of code (r, c) at out[p·plane_stride + r·ld + c].
void digit_planes(const uint8_t* codes, int64_t rows, int64_t k, int64_t ld, int8_t* out, int64_t plane_stride,
                  cudaStream_t stream);
inline int64_t digit_plane_bytes(int64_t rows, int64_t ld) { return 3 * rows * ld; }

// Whether a dense FP8 weight is worth converting to digit planes for one call of `rows` rows (the
// conversion reads the weight once and writes three times its bytes).
inline bool imma_weight_planes(int64_t rows) { return rows >= 512; }

}  // namespace dsv4::cuda
