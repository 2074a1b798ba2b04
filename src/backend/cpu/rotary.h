// CPU application of RoPE (MODEL.md §5.3) and of the Hadamard rotation (§2.4).
#pragma once

#include "backend/ops.h"
#include "core/thread_pool.h"

namespace dsv4::cpu {

// cos/sin of fp32(position)·f_i for the `half` pairs.
void rope_angles(const float* freqs, int half, int32_t position, float* cos_out, float* sin_out);

// Rotates the interleaved pairs of x[0 .. 2·half) in fp32 (forward or conjugate).
void rope_rotate(float* x, const float* cos_v, const float* sin_v, int half, bool inverse);

void rope(ThreadPool& pool, const RopeParams& p);

// In-place fp32 Walsh-Hadamard transform (Sylvester order) of n = 2^k values, then × n^-½.
void hadamard_row(float* x, int n);

void hadamard(ThreadPool& pool, const HadamardParams& p);

}  // namespace dsv4::cpu
