// The fast tier's plain GEMM on the CUDA cores for many rows where cuBLASLt does not serve (fp32
// weights; bf16 ones with cuBLASLt off or refusing): y = Σ_k x·W in fp32, each output one fused multiply-add chain in
// ascending K (spec/NUMERICS.md "fast": fp32 accuracy in a fixed order; the exact tier's separate multiply and add
// round twice as often and run at half the rate). 128x128 CTA tiles, 8x8 outputs a thread.
#pragma once

#include <cuda_runtime_api.h>

#include "backend/cuda/gemm_internal.h"

namespace dsv4::cuda {

// Whether the kernel takes the call: fp32 or bf16 weight, one group, K % 16 == 0, 16-byte aligned x
// and weights (x_ld % 8 == 0); a pair alike.
bool fast_sgemm_takes(const ExactPlainArgs& a);

// Runs `a` (and its pair, in the same launch).
void fast_sgemm(const ExactPlainArgs& a, cudaStream_t stream);

}  // namespace dsv4::cuda
