// The one-row FP8 GEMV of a decode step's dense projections (wq_b, wo_a, wo_b, the shared expert...),
// with the exact fp64 block sums of the skinny kernel (gemm.cu) and the same bits.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/gemm_internal.h"

namespace dsv4::cuda {

// Runs `a` when the kernel applies: a dense FP8 weight and one row (a.rows == 1; no pair), K of a group
// at most kFp8GemvMaxK, from a bf16 row (quantized as the kernel stages it) or codes. Returns false,
// having launched nothing, otherwise. Split-K scratch (a.partial) is not used: the kernel's warps split
// K themselves.
bool fp8_gemv(const ExactBlockArgs& a, cudaStream_t stream);
// Whether fp8_gemv would take `a` (then it launches exactly once).
bool fp8_gemv_applies(const ExactBlockArgs& a);
// Taken wherever it applies: a decode step measured faster with it than on the skinny kernel, its gain
// being the weight stages it loads before the PDL wait (docs/perf-history.md, session 15).

constexpr int64_t kFp8GemvMaxK = 8192;

// Launches so far in this process (tests check that a shape took this kernel).
int64_t fp8_gemv_launches();

}  // namespace dsv4::cuda
