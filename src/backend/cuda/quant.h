// Activation quantizers on the GPU (MODEL.md §2.2-§2.3), bit-identical to core/quant.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace dsv4::cuda {

// x: bf16 [rows, cols]; per row, blocks of blk (32..512, dividing cols) get FP8 e4m3 codes and a
// UE8M0 scale: codes [rows, cols], scales [rows, cols / blk].
void quantize_e4m3(const uint16_t* x, int64_t rows, int64_t cols, int blk, uint8_t* codes, uint8_t* scales,
                   cudaStream_t stream);

// FP4 e2m1, blocks of 32: codes packed two per byte (low nibble first) [rows, cols / 2],
// scales [rows, cols / 32].
void quantize_e2m1(const uint16_t* x, int64_t rows, int64_t cols, uint8_t* packed, uint8_t* scales,
                   cudaStream_t stream);

}  // namespace dsv4::cuda
