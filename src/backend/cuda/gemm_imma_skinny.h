// Block-scaled FP4 GEMMs of a few rows per weight (a decode batch's routed experts) on the int8
// tensor cores, with the exact kernels' results bit for bit.
//
// The tensor-core kernel of gemm_imma.h tiles 128 activation rows, so it wastes most of its work
// below 64 rows a weight, and the SIMT kernels spend ~9 instructions a product. Here the operands
// swap: the weight is the MMA's 16-row operand (16 output columns a fragment) and up to eight
// activation rows are the 8-column operand, one fragment per activation digit plane. The arithmetic
// is gemm_imma.h's: e2m1·2 as int8, e4m3·2^9 as three signed base-128 digits, an exact int32 per
// 32-wide K block, rounded once to fp32, times both scales, added in ascending K.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/gemm_internal.h"

namespace dsv4::cuda {

constexpr int64_t kImmaSkinnyMaxK = 16384;

// Whether a call of FP4 weights with about rows_per_weight rows each comes here (with the policy's int8
// tensor cores on: exact_imma false leaves every shape to the SIMT kernels): two rows or more and
// fewer than policy.imma_min_rows (the 128-row kernel's), K of a group at most kImmaSkinnyMaxK. Its
// caller then makes the activations' digit planes (a_digits), which the kernel needs. Taken wherever it
// applies: decode steps measured faster with it than on the SIMT kernels (docs/perf-history.md, session 16).
bool imma_skinny_takes(GemmWeightKind kind, int64_t rows_per_weight, int64_t kg, const GemmPolicy& policy);
// Whether imma_skinny_gemm takes `a` (then it launches exactly once, a pair included): a grouped call
// of activation codes with their digit planes.
bool imma_skinny_applies(const ExactBlockArgs& a, const GemmPolicy& policy);
// Runs `a` (a pair in the same launch); false, having launched nothing, when it does not apply.
bool imma_skinny_gemm(const ExactBlockArgs& a, const GemmPolicy& policy, cudaStream_t stream);
// Launches so far in this process (tests check that a shape took this kernel).
int64_t imma_skinny_launches();

}  // namespace dsv4::cuda
