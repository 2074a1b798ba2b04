// Row-wise CUDA kernels of the Ops (norms, RoPE, Hadamard, quantization simulation, embedding, row
// gathers). Each
// launcher takes its op's parameters (backend/op_params.h, device pointers) and reproduces the CPU
// backend's arithmetic (backend/cpu) bit for bit.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/op_params.h"

namespace dsv4::cuda {

void rms_norm(const RmsNormParams& p, cudaStream_t stream);

// With p.positions, the forward RoPE of each head follows in the same warp; freqs: p.rope's rope_dim/2
// fp32 frequencies (backend/rope.h) in device memory, read only with positions.
void head_rms_norm(const HeadRmsNormParams& p, const float* freqs, cudaStream_t stream);

// freqs: p.rope's rope_dim/2 fp32 frequencies in device memory.
void rope(const RopeParams& p, const float* freqs, cudaStream_t stream);

// fp32 butterflies in the CPU order; dim <= 1024.
void hadamard(const HadamardParams& p, cudaStream_t stream);

// kFp8 blocks of 32..512 elements.
void quant_sim(const QuantSimParams& p, cudaStream_t stream);

// An id outside [0, vocab) gives a zero row and is reported in err (DeviceError::kEmbedId; may be null).
void embed(const EmbedParams& p, int32_t* err, cudaStream_t stream);

// 16-byte vectors where the width and pointers allow, bytes otherwise; an index outside the input gives a
// zero row and is reported in err (DeviceError::kGatherRow).
void gather_rows(const GatherRowsParams& p, int32_t* err, cudaStream_t stream);

}  // namespace dsv4::cuda
