// FP4 weights widened for FP8 tensor-core GEMMs: each 128-wide block of a weight row becomes 128 e5m2
// codes against the block's largest 32-wide scale plus that scale in fp32, exactly as the wgmma kernel
// widens a tile in shared memory (gemm/mma_fp8.cuh: exact while a block's four scales span at most 26
// octaves; a wider span is reported as DeviceError::kGemmFp4Span). The codes are row-major [n][kg],
// the scales [n][kg/128]: what the wgmma kernel's kWide stages load.
#pragma once

#include <cuda_runtime_api.h>

#include "backend/cuda/gemm_internal.h"

namespace dsv4::cuda {

// Widens `experts` weights of `a` (the dense call's one weight when a.offsets is null), and its pair's,
// into weight slots of a.wide / a.wide_scale: expert e in slot e, its pair's in slot a.wide_slots + e
// (slot s: codes at wide + s·n·kg, scales at wide_scale + s·n·kg/128). Experts without rows are
// skipped (nothing reads their slots). err: the device error word.
void widen_fp4(const ExactBlockArgs& a, int experts, int32_t* err, cudaStream_t stream);

}  // namespace dsv4::cuda
