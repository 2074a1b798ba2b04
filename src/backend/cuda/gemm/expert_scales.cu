// Activation scales cut per expert (expert_scales.h).
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm/expert_scales.h"
#include "backend/cuda/gemm_tiles.cuh"
#include "backend/cuda/launch.cuh"

namespace dsv4::cuda {
namespace {

// A thread a (K block, row): the row's expert by binary search (the last whose first row is at most
// the row: an empty expert's first row equals the next one's).
__global__ void expert_scales_kernel(const float* scales, int64_t scale_ld, const int32_t* offsets, int experts,
                                     int64_t rows, int64_t k, float* out) {
  pdl_enter();
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= k / 128 * rows) return;
  const int64_t kb = i / rows, row = i % rows;
  if (row >= offsets[experts]) return;
  int lo = 0, hi = experts - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (offsets[mid] <= row) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const int64_t first = offsets[lo], ld = (offsets[lo + 1] - first + 3) / 4 * 4;
  out[expert_scale_offset(first, lo, k) + kb * ld + (row - first)] = scales[kb * scale_ld + row];
}

}  // namespace

void expert_scales(const float* scales, int64_t scale_ld, const int32_t* offsets, int experts, int64_t rows, int64_t k,
                   float* out, cudaStream_t stream) {
  DSV4_CUDA_REQUIRE(experts >= 1 && k % 128 == 0 && scale_ld >= rows, "expert_scales: bad arguments");
  const int64_t threads = k / 128 * rows;
  if (threads == 0) return;
  launch_kernel(expert_scales_kernel, static_cast<unsigned>(gemm_tiles::cdiv(threads, 256)), dim3(256), 0, stream,
                scales, scale_ld, offsets, experts, rows, k, out);
}

}  // namespace dsv4::cuda
