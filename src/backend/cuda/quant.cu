#include <cuda_bf16.h>
#include <cuda_fp4.h>
#include <cuda_fp8.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/quant.h"

namespace dsv4::cuda {
namespace {

// One warp per (row, block); each lane holds blk/32 consecutive elements.
template <int kPerLane>
__global__ void quantize_e4m3_kernel(const __nv_bfloat16* __restrict__ x, int64_t rows, int64_t cols,
                                     uint8_t* __restrict__ codes, uint8_t* __restrict__ scales) {
  pdl_enter();
  constexpr int blk = kPerLane * kWarp;
  const int64_t nblk = cols / blk;
  const int64_t warp = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (warp >= rows * nblk) return;
  const int64_t base = warp * blk + lane * kPerLane;  // rows are contiguous blocks
  float v[kPerLane];
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    v[i] = __bfloat162float(x[base + i]);
    amax = fmaxf(amax, fabsf(v[i]));
  }
  amax = fmaxf(warp_max(amax), 1e-4f);
  const uint8_t e = ceil_pow2_e8(amax * (1.0f / 448.0f));
  const float inv = pow2_inverse(e8_value(e));
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) codes[base + i] = static_cast<uint8_t>(act_code(v[i], inv));
  if (lane == 0) scales[warp] = e;
}

// One warp per 32-element block, one element per lane; lanes pair up to pack nibbles.
__global__ void quantize_e2m1_kernel(const __nv_bfloat16* __restrict__ x, int64_t n, uint8_t* __restrict__ packed,
                                     uint8_t* __restrict__ scales) {
  pdl_enter();
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const float v = i < n ? __bfloat162float(x[i]) : 0.0f;
  const float amax = fmaxf(warp_max(fabsf(v)), 6.0f * 0x1p-126f);
  if (i >= n) return;
  const uint8_t e = ceil_pow2_e8(amax * (1.0f / 6.0f));
  const float s = e8_value(e);
  const float q = fminf(fmaxf(v / s, -6.0f), 6.0f);
  const uint8_t code = __nv_cvt_float_to_fp4(q, __NV_E2M1, cudaRoundNearest) & 0xf;
  const uint8_t hi = static_cast<uint8_t>(__shfl_down_sync(0xffffffffu, code, 1));
  if ((i & 1) == 0) packed[i / 2] = static_cast<uint8_t>(code | (hi << 4));
  if ((i & 31) == 0) scales[i / 32] = e;
}

}  // namespace

void quantize_e4m3(const uint16_t* x, int64_t rows, int64_t cols, int blk, uint8_t* codes, uint8_t* scales,
                   cudaStream_t stream) {
  DSV4_CUDA_REQUIRE(blk >= 32 && blk <= 512 && blk % 32 == 0 && cols % blk == 0,
                    "quantize_e4m3: the block must be a multiple of 32 in [32, 512] dividing the columns");
  const int64_t warps = rows * (cols / blk);
  if (warps == 0) return;
  constexpr int kThreads = 256;
  const auto grid = static_cast<unsigned>((warps * kWarp + kThreads - 1) / kThreads);
  const auto* xb = reinterpret_cast<const __nv_bfloat16*>(x);
  switch (blk / kWarp) {
    case 1:
      launch_kernel(quantize_e4m3_kernel<1>, grid, kThreads, 0, stream, xb, rows, cols, codes, scales);
      break;
    case 2:
      launch_kernel(quantize_e4m3_kernel<2>, grid, kThreads, 0, stream, xb, rows, cols, codes, scales);
      break;
    case 4:
      launch_kernel(quantize_e4m3_kernel<4>, grid, kThreads, 0, stream, xb, rows, cols, codes, scales);
      break;
    case 8:
      launch_kernel(quantize_e4m3_kernel<8>, grid, kThreads, 0, stream, xb, rows, cols, codes, scales);
      break;
    case 16:
      launch_kernel(quantize_e4m3_kernel<16>, grid, kThreads, 0, stream, xb, rows, cols, codes, scales);
      break;
    default:
      throw_error("quantize_e4m3: block must be 32, 64, 128, 256 or 512");
  }
}

void quantize_e2m1(const uint16_t* x, int64_t rows, int64_t cols, uint8_t* packed, uint8_t* scales,
                   cudaStream_t stream) {
  DSV4_CUDA_REQUIRE(cols % 32 == 0, "quantize_e2m1: the columns must be a multiple of 32");
  const int64_t n = rows * cols;
  if (n == 0) return;
  constexpr int kThreads = 256;
  launch_kernel(quantize_e2m1_kernel, static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, stream,
                reinterpret_cast<const __nv_bfloat16*>(x), n, packed, scales);
}

}  // namespace dsv4::cuda
