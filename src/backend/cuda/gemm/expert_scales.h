// Activation scales cut per expert for GEMMs called expert by expert: cuBLASLt's 1x128 (VEC128) scale
// mode reads an operand's scales as one dense K-block-major block [k/128][ceil4(rows)] (the rows
// rounded up to 4, as gemm_internal.h's act_scale_ld), while a grouped call's rows share one
// [k/128][scale_ld] array. Expert e's block starts at expert_scale_offset(offsets[e], e, k): rows + 3
// floats an expert's K block at most, expert_scale_floats (gemm_plan.h) in all.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace dsv4::cuda {

constexpr int64_t expert_scale_offset(int64_t first_row, int expert, int64_t k) {
  return k / 128 * (first_row + 3 * int64_t{expert});
}

// Copies the scales of the rows [offsets[e], offsets[e+1]) of each expert (offsets: device, experts + 1
// entries, offsets[experts] <= rows) from scales [k/128][scale_ld] into their expert's block of out.
void expert_scales(const float* scales, int64_t scale_ld, const int32_t* offsets, int experts, int64_t rows, int64_t k,
                   float* out, cudaStream_t stream);

}  // namespace dsv4::cuda
