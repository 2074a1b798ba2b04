// Row-wise CUDA kernels of the Ops (norms, RoPE, Hadamard, quantization simulation, embedding),
// with plain-argument launchers so that .cu files stay free of the host-side headers.
// Each reproduces the CPU backend's arithmetic (backend/cpu); see backend/ops.h for the contracts.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace dsv4::cuda {

// y = bf16(w * (x / sqrt(mean(x^2) + eps))) per row, fp32. y may equal x.
void rms_norm(const uint16_t* x, uint16_t* y, const uint16_t* w, int64_t rows, int64_t dim, float eps,
              cudaStream_t stream);

// Per-head RMS with every step a bf16 op (MODEL.md §5.2), in place; `heads` rows of head_dim.
void head_rms_norm(uint16_t* x, int64_t heads, int head_dim, float eps, cudaStream_t stream);
// The same, then (positions set) forward RoPE of each head's last rope_dim dims at the position of its
// row (heads_per_row heads a row) in the same warp.
void head_rms_norm_rope(uint16_t* x, int64_t heads, int heads_per_row, int head_dim, float eps,
                        const int32_t* positions, const float* freqs, int rope_dim, cudaStream_t stream);

// Interleaved RoPE on the last rope_dim dims of every head, in place; freqs: rope_dim/2 fp32
// frequencies (backend/rope.h) in device memory.
void rope(uint16_t* x, int64_t rows, int heads, int head_dim, int rope_dim, const int32_t* positions,
          const float* freqs, bool inverse, cudaStream_t stream);

// x = bf16(dim^-1/2 * H x) per row (Sylvester order), fp32 butterflies in the CPU order. dim <= 1024.
void hadamard(uint16_t* x, int64_t rows, int dim, cudaStream_t stream);

// Q8(x, block) or Q4(x) in place on cols [0, cols) of rows of `stride` elements.
void quant_sim_e4m3(uint16_t* x, int64_t rows, int64_t cols, int64_t stride, int block, cudaStream_t stream);
void quant_sim_e2m1(uint16_t* x, int64_t rows, int64_t cols, int64_t stride, cudaStream_t stream);

// out[t, c, :] = table[ids[t], :] for c < copies; an id outside [0, vocab) is reported in err.
void embed(const int32_t* ids, int64_t tokens, const uint16_t* table, int64_t vocab, int64_t dim, int copies,
           uint16_t* out, int32_t* err, cudaStream_t stream);

}  // namespace dsv4::cuda
