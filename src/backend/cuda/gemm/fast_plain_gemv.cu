// The fast tier's few-row plain GEMM (fast_plain_gemv.h): a warp an output column, every row of the
// call at once (a chain a row a lane).
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/gemm/fast_plain_gemv.h"
#include "backend/cuda/gemm/plain_loads.cuh"
#include "backend/cuda/launch.cuh"

namespace dsv4::cuda {
namespace {

constexpr int kWarps = 8, kThreads = kWarps * kWarp, kMaxRows = static_cast<int>(kFastPlainGemvMaxRows);

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Columns [0, n) are the first weight's, [n, 2n) the pair's.
template <bool kF32>
__global__ void __launch_bounds__(kThreads) fast_plain_gemv_kernel(const ExactPlainArgs p) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t col = int64_t{blockIdx.x} * kWarps + static_cast<int>(threadIdx.x) / kWarp;
  const bool second = col >= p.n;
  const int64_t n = second ? col - p.n : col;
  const bool live = n < p.n && (!second || p.w_b);  // past the last column (or the pair's): no work
  const char* w = static_cast<const char*>(second ? p.w_b : p.w) + (live ? n : 0) * p.kg * (kF32 ? 4 : 2);
  pdl_enter();
  if (!live) return;  // warp-uniform
  float acc[kMaxRows] = {};
#pragma unroll 4
  for (int64_t k = 8 * lane; k < p.kg; k += 8 * kWarp) {
    float wv[8];
    load_w8<kF32>(w + k * (kF32 ? 4 : 2), wv);
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r) {
      if (r >= p.rows) break;
      float xv[8];
      bf16x8(__ldg(reinterpret_cast<const uint4*>(p.x + r * p.x_ld + k)), xv);
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[r] = fmaf(xv[i], wv[i], acc[r]);
    }
  }
  void* y = second ? p.y_b : p.y;
#pragma unroll
  for (int r = 0; r < kMaxRows; ++r) {
    if (r >= p.rows) break;
    float v = acc[r];
#pragma unroll
    for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane != 0) continue;
    if (p.y_f32) {
      static_cast<float*>(y)[r * p.y_ld + n] = v;
    } else {
      static_cast<uint16_t*>(y)[r * p.y_ld + n] = f_to_bf16(v);
    }
  }
}

}  // namespace

bool fast_plain_gemv_takes(const ExactPlainArgs& a) {
  const bool pair_ok = a.w_b == nullptr || (aligned16(a.w_b) && a.y_b != nullptr);
  return a.rows <= kFastPlainGemvMaxRows && a.groups == 1 && a.ng == a.n && a.kg > 0 && a.kg % 8 == 0 &&
         a.x_ld % 8 == 0 && aligned16(a.x) && aligned16(a.w) && pair_ok;
}

void fast_plain_gemv(const ExactPlainArgs& a, cudaStream_t stream) {
  DSV4_CUDA_REQUIRE(fast_plain_gemv_takes(a), "fast plain gemv: unsupported call (rows, one group, K % 8, alignment)");
  if (a.rows == 0) return;
  const int64_t cols = (a.w_b ? 2 : 1) * a.n, grid = (cols + kWarps - 1) / kWarps;
  DSV4_CUDA_REQUIRE(grid < (int64_t{1} << 31), "fast plain gemv: grid out of range");
  if (a.w_f32) {
    launch_kernel(fast_plain_gemv_kernel<true>, dim3(static_cast<unsigned>(grid)), dim3(kThreads), 0, stream, a);
  } else {
    launch_kernel(fast_plain_gemv_kernel<false>, dim3(static_cast<unsigned>(grid)), dim3(kThreads), 0, stream, a);
  }
}

}  // namespace dsv4::cuda
