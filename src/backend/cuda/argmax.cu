#include <cmath>

#include "backend/cuda/argmax.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/launch.cuh"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 512;

// (value, index) pairs ordered by value, ties and NaN to the lower index: a strict order, so the
// block reduction gives the same winner whatever the order of its steps.
__device__ __forceinline__ bool wins(float v, int64_t i, float bv, int64_t bi) {
  if (isnan(v)) return false;
  if (isnan(bv)) return true;
  return v > bv || (v == bv && i < bi);
}

// Folds candidate (v, i) into the running best (bi == none: no candidate yet).
__device__ __forceinline__ void fold(float v, int64_t i, int64_t none, float& bv, int64_t& bi) {
  if (i == none) return;
  if (bi == none || wins(v, i, bv, bi) || (isnan(bv) && isnan(v) && i < bi)) {
    bv = v;
    bi = i;
  }
}

// One CTA per row: strided scan, then a warp and block reduction.
__global__ void argmax_kernel(const float* x, int64_t cols, int64_t limit, int32_t* out) {
  pdl_enter();
  __shared__ float sv[kThreads / kWarp];
  __shared__ int64_t si[kThreads / kWarp];
  const float* row = x + int64_t{blockIdx.x} * cols;
  float bv = NAN;
  int64_t bi = limit;  // "none yet" loses to any real index
  for (int64_t i = threadIdx.x; i < limit; i += kThreads) fold(row[i], i, limit, bv, bi);
  for (int o = kWarp / 2; o > 0; o >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, bv, o);
    const int64_t i = __shfl_xor_sync(0xffffffffu, bi, o);
    fold(v, i, limit, bv, bi);
  }
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (lane == 0) {
    sv[warp] = bv;
    si[warp] = bi;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < kThreads / kWarp; ++w) fold(sv[w], si[w], limit, bv, bi);
  out[blockIdx.x] = static_cast<int32_t>(bi == limit ? 0 : bi);
}

}  // namespace

void argmax(const ArgmaxParams& p, cudaStream_t stream) {
  if (p.rows == 0) return;
  DSV4_CUDA_REQUIRE(p.rows <= 2147483647, "argmax: too many rows");
  launch_kernel(argmax_kernel, static_cast<unsigned>(p.rows), kThreads, 0, stream, p.x, p.cols, p.limit, p.out);
}

}  // namespace dsv4::cuda
