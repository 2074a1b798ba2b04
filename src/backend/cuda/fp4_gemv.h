// The one-row FP4 GEMV of a decode step's routed experts (one activation row per expert), with the
// exact integer block sums of the skinny kernel (gemm.cu) and the same bits.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/gemm_internal.h"

namespace dsv4::cuda {

// Runs `a` in row tiles of one row (each CTA one row of the dense or grouped launch, as the skinny
// kernel's one-row tiles) when the kernel applies: FP4 weights, activation codes (not bf16 rows), K of
// a group at most kFp4GemvMaxK, no split-K. Returns false, having launched nothing, otherwise. The
// caller decides that one-row tiles are wanted.
// A pair (a.y_b) runs in the same launch: the second weight's column tiles follow the first's.
bool fp4_gemv(const ExactBlockArgs& a, cudaStream_t stream);
// Whether fp4_gemv would take `a` (then it launches exactly once).
bool fp4_gemv_applies(const ExactBlockArgs& a);

constexpr int64_t kFp4GemvMaxK = 16384;

// Whether a grouped call of FP4 experts with about rows_per_weight rows each comes here (one-row
// tiles): its caller then makes the activations' digit planes once for all CTAs (a_digits).
bool fp4_gemv_takes(GemmWeightKind kind, int64_t rows_per_weight, int64_t kg);
// Launches so far in this process (tests check that a shape took this kernel).
int64_t fp4_gemv_launches();

}  // namespace dsv4::cuda
