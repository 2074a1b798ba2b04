// The fast tier's block-scaled GEMM for many rows on Hopper's warpgroup MMA (wgmma, sm_90a):
// FP8 and FP4 weights, dense or grouped by expert (the MoE's prefill), a pair in one launch.
//
// Arithmetic (spec/NUMERICS.md "fast"): per 128-wide K block the tensor cores sum the block's
// products into a fresh fp32 fragment, promoted into the fp32 accumulator with both scales
// (acc += block · sa · sw), blocks in ascending K, as DeepSeek's Hopper kernels do. FP4 weights are
// re-encoded exactly per 128-wide block of a weight row: each 32-wide sub-block's e2m1 codes times
// 2^(its scale − the row block's) become e5m2 values (exact while the row block's four scales span
// at most 26 octaves; checkpoints span 0-2), so one promotion per 128 stands for four. A wider span
// is reported in `err` (DeviceError::kGemmFp4Span: the backend throws at its next synchronisation).
//
// A CTA owns 128 rows (one expert's, grouped) x 256 output columns; two warpgroups each multiply 64
// rows, 128 columns at a time. K stages arrive by cp.async four (FP8, FP4 widened beforehand) or three
// (FP4) deep; FP4 codes are widened in shared memory one stage ahead of the multiply.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/gemm_internal.h"

namespace dsv4::cuda {

// Whether the kernel takes the call: FP8 or FP4 codes (a.codes, not a.x), one group, K % 128 == 0,
// 16-byte aligned codes and weights.
bool wgmma_takes(const ExactBlockArgs& a);

// Runs `a` (with its pair) from activation codes and scales; err (optional, the device's error word:
// device_error.h) records DeviceError::kGemmFp4Span.
void wgmma_gemm(const ExactBlockArgs& a, int32_t* err, cudaStream_t stream);

// FP4 calls with the weights widened beforehand (GemmPolicy::fp4_prewiden): each pass widens
// `experts_per_pass` experts' weights (and the pair's) into `scratch` (wgmma_widened_bytes for that
// many) with one launch, then multiplies their rows with another; the same bits and error reports as
// wgmma_gemm, which widens every weight tile in shared memory, once per CTA that reads it.
int64_t wgmma_widened_bytes(const ExactBlockArgs& a, int experts_per_pass);
void wgmma_gemm_widened(const ExactBlockArgs& a, int experts_per_pass, void* scratch, int32_t* err,
                        cudaStream_t stream);

}  // namespace dsv4::cuda
