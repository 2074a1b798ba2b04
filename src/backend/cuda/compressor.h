// Compressor kernels (MODEL.md §5.5): the element-wise store half of compressor_step and the fully
// fused compressor_emit. Arithmetic as in backend/cpu/compressor.cpp, bit for bit; the contracts are
// backend/op_params.h's CompressorStepParams / CompressorEmitParams.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/device_error.h"
#include "backend/op_params.h"

namespace dsv4::cuda {

// The store half of compressor_step: state rows [a_t | g_t + ape[positions[t] mod ratio]] (fp32, dim
// 2·cd, cd = p.wkv.rows) into p.state (format kF32) at p.state_slots[t]; −1 skips the token. a, g:
// [tokens, cd] fp32, the step's two GEMMs (made by the caller; p's weights are not read). A slot
// outside the table records DeviceError::kCompressorSlot in err (may be null) and is skipped.
void compressor_store(const CompressorStepParams& p, const float* a, const float* g, int32_t* err, cudaStream_t stream);

// One CTA per entry: gather, softmax pooling, RMSNorm, RoPE, Hadamard + Q4 (indexer) or Q8 (attention),
// encode. p with device pointers (c·ratio <= 256, head_dim a multiple of 32 up to 512; output tables
// kAttnFp8, kBf16, kIndexFp4, kIndexFp8 or kF32); freqs: the [rope_dim / 2] RoPE frequencies of p.rope
// (backend/rope.h) in device memory. Entries whose rows or output slot are unusable are skipped and
// recorded in err as kCompressorSlot.
void compressor_emit(const CompressorEmitParams& p, const float* freqs, int32_t* err, cudaStream_t stream);

}  // namespace dsv4::cuda
