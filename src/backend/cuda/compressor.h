// Compressor kernels (MODEL.md §5.5): the element-wise store half of compressor_step and the fully
// fused compressor_emit. Arithmetic as in backend/cpu/compressor.cpp, bit for bit; the contracts are
// backend/ops.h's CompressorStepParams / CompressorEmitParams.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/device_table.h"

namespace dsv4::cuda {

// State rows [a_t | g_t + ape[positions[t] mod ratio]] (fp32, dim 2·cd) into `state` (format kF32) at
// slots[t]; −1 skips the token. a, g: [tokens, cd] fp32 (the caller's exact GEMMs), ape: [ratio, cd].
// A slot outside the table records DeviceError::kCompressorSlot in err (may be null) and is skipped.
void compressor_store(const float* a, const float* g, int64_t tokens, int64_t cd, const int32_t* positions,
                      const float* ape, int ratio, DeviceTable state, const int32_t* slots, int32_t* err,
                      cudaStream_t stream);

// CompressorEmitParams restated for the device. All pointers are device memory.
struct CompressorEmitArgs {
  int64_t entries = 0;
  const int32_t* block_index = nullptr;  // [entries]
  const int32_t* rows = nullptr;         // [entries, c·ratio] state slots, previous block first (c = 2 iff ratio 4)
  DeviceTable state{};                   // kF32, dim 2·c·head_dim
  int ratio = 0;                         // c·ratio <= 256
  int head_dim = 0;                      // d_c: a multiple of 32, <= 512
  int rope_dim = 0;
  const uint16_t* norm_weight = nullptr;  // [head_dim] bf16
  float norm_eps = 1e-6f;
  const float* freqs = nullptr;  // [rope_dim / 2] fp32 RoPE frequencies (backend/rope.h)
  bool indexer = false;
  DeviceTable out{};                   // kAttnFp8, kBf16, kIndexFp4, kIndexFp8 (or kF32), dims {head_dim, rope_dim}
  const int32_t* out_slots = nullptr;  // [entries]; −1 = compute but do not store
  int32_t* err = nullptr;              // DeviceError::kCompressorSlot: the entry is skipped
};

// One CTA per entry: gather, softmax pooling, RMSNorm, RoPE, Hadamard + Q4 (indexer) or Q8 (attention),
// encode. Entries whose rows or output slot are unusable are skipped with kCompressorSlot.
void compressor_emit(const CompressorEmitArgs& a, cudaStream_t stream);

}  // namespace dsv4::cuda
