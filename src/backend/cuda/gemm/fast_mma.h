// The fast tier's block-scaled GEMM on the FP8 tensor cores (spec/NUMERICS.md "fast"), for FP8 and
// FP4 weights, dense or grouped by expert, any number of rows.
//
// Per 128-wide K block (FP8) or 32-wide K block (FP4, its codes decoded exactly to e4m3) the block
// product is summed on the tensor cores into a fresh fp32 fragment and promoted into the fp32
// accumulator with both scales (acc += block · (sa · sb)), as DeepSeek's own Hopper kernels do; blocks
// are added in ascending K (per 32 measured faster than one re-encoded block a 128: docs/perf.md).
// With a split of K, each split's partial sums land
// in fp32 scratch and one pass adds the splits in order: results are the same run to run, and depend on the rows beside
// a row only through the plan's tile and split choice.
//
// The weight is the MMA's 16-row operand (16 output columns a fragment) and the activation rows the
// 8-column operand, so few rows waste no tensor-core work and each warp streams its 64 weight rows
// through a private ring of cp.async stages.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/gemm/gemm_plan.h"
#include "backend/cuda/gemm_internal.h"

namespace dsv4::cuda {

// How a call runs: rows per tile (8, 16 or 32), K splits (>= 1; each split a run of 128-blocks),
// whether the tile's activation codes for a split stay in shared memory (gemm_plan.h).
struct FastMmaShape {
  int tile_rows = 8;
  int splits = 1;
  bool resident = false;
};

// fp32 scratch floats and zeroed int32 counters a call needs for its splits (0 when splits == 1).
int64_t fast_mma_scratch_floats(const ExactBlockArgs& a, const FastMmaShape& s);
int64_t fast_mma_counters(const ExactBlockArgs& a, const FastMmaShape& s);

// Whether the kernel quantizes a.x (bf16 rows) itself: a dense call with a resident shape and
// 16-byte aligned rows. Otherwise it takes codes and scales from quantize_act (or the MoE's gather).
bool fast_mma_takes_bf16(const ExactBlockArgs& a, const FastMmaShape& s);

// Runs `a` (a pair in the same launch) with the shape's tiles and splits, from bf16 rows (a.x) or
// activation codes; with splits, `partial` and `counters` hold what the two functions above ask for
// (the counters zeroed before the first call; the kernel leaves them zeroed).
void fast_mma_gemm(const ExactBlockArgs& a, const FastMmaShape& s, float* partial, int32_t* counters,
                   cudaStream_t stream);

}  // namespace dsv4::cuda
