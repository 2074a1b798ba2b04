// The fast tier's few-row plain GEMM (fast_plain_gemv.h): a warp an output column, every row of the
// call at once (a chain a row a lane); fp32, bf16 or a bf16 weight's FP8 twin.
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/gemm/fast_plain_gemv.h"
#include "backend/cuda/gemm/plain_loads.cuh"
#include "backend/cuda/gemm_tiles.cuh"
#include "backend/cuda/launch.cuh"

namespace dsv4::cuda {
namespace {

constexpr int kWarps = 8, kThreads = kWarps * kWarp;
// Up to kFewRows rows a warp takes one column (the most warps for decode's bandwidth-bound calls); more
// rows are bound by the multiply-adds and the loads of x, so a warp takes two columns where both are of
// one weight and one group (each load of x then feeds both).
constexpr int kFewRows = 8, kMaxRows = static_cast<int>(kFastPlainGemvMaxRows);

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

enum class Form { kF32, kBf16, kFp8Twin };

// Eight values of weight row n at column k (a multiple of 8): fp32, bf16, or the bf16 values of the FP8
// twin, bf16(e4m3 · 2^s) (the bf16 weight's own values, so the sums match it bit for bit).
template <Form F>
__device__ __forceinline__ void weight8(const ExactPlainArgs& p, const void* w, int64_t n, int64_t k, float (&v)[8]) {
  if constexpr (F == Form::kFp8Twin) {
    const uint2 codes = __ldg(reinterpret_cast<const uint2*>(p.w_fp8 + n * p.kg + k));
    const float s = gemm_tiles::ue8m0_f(p.w_fp8_scale[(n / 128) * (p.kg / 128) + k / 128]);  // 0: 2^-127
    const uint32_t words[2] = {codes.x, codes.y};
#pragma unroll
    for (int h = 0; h < 4; ++h) {  // two codes a conversion (e4m3 -> f16 is exact)
      const auto two = static_cast<__nv_fp8x2_storage_t>((words[h / 2] >> (16 * (h % 2))) & 0xffffu);
      const float2 f = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(two, __NV_E4M3)));
      v[2 * h] = round_bf16(__fmul_rn(f.x, s));
      v[2 * h + 1] = round_bf16(__fmul_rn(f.y, s));
    }
  } else {
    load_w8<F == Form::kF32>(static_cast<const char*>(w) + (n * p.kg + k) * (F == Form::kF32 ? 4 : 2), v);
  }
}

// A warp's kCols consecutive columns (of one weight and one group: the launch sees to it), every row of
// the call at once: a column's sum is the same whatever kCols (each lane's chain over its K slices,
// then the butterfly), so a call's bits do not depend on the kernel's shape.
// Columns [0, n) are the first weight's, [n, 2n) the pair's; column c of group c / ng reads that group's
// K columns of x.
template <Form F, int kRows, int kCols>
__global__ void __launch_bounds__(kThreads) fast_plain_gemv_kernel(const ExactPlainArgs p) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t col = (int64_t{blockIdx.x} * kWarps + static_cast<int>(threadIdx.x) / kWarp) * kCols;
  const bool second = col >= p.n;
  const int64_t n = second ? col - p.n : col;
  const bool live = n < p.n && (!second || p.w_b);  // past the last column (or the pair's): no work
  const void* w = second ? p.w_b : p.w;
  const uint16_t* x = p.x + (live ? n / p.ng : 0) * p.kg;
  pdl_enter();
  if (!live) return;  // warp-uniform
  float acc[kRows][kCols] = {};
#pragma unroll(kRows > kFewRows ? 1 : 4)
  for (int64_t k = 8 * lane; k < p.kg; k += 8 * kWarp) {
    float wv[kCols][8];
#pragma unroll
    for (int c = 0; c < kCols; ++c) weight8<F>(p, w, n + c, k, wv[c]);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (r >= p.rows) break;
      float xv[8];
      bf16x8(__ldg(reinterpret_cast<const uint4*>(x + r * p.x_ld + k)), xv);
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[r][c] = fmaf(xv[i], wv[c][i], acc[r][c]);
      }
    }
  }
  void* y = second ? p.y_b : p.y;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if (r >= p.rows) break;
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      float v = acc[r][c];
#pragma unroll
      for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      if (lane != 0) continue;
      if (p.y_f32) {
        static_cast<float*>(y)[r * p.y_ld + n + c] = v;
      } else {
        static_cast<uint16_t*>(y)[r * p.y_ld + n + c] = f_to_bf16(v);
      }
    }
  }
}

template <int kRows, int kCols>
void launch_form(const ExactPlainArgs& a, cudaStream_t stream) {
  const int64_t cols = (a.w_b ? 2 : 1) * a.n, per_cta = int64_t{kWarps} * kCols;
  const int64_t grid = (cols + per_cta - 1) / per_cta;
  DSV4_CUDA_REQUIRE(grid < (int64_t{1} << 31), "fast plain gemv: grid out of range");
  const dim3 g(static_cast<unsigned>(grid)), b(kThreads);
  if (a.w_f32) {
    launch_kernel(fast_plain_gemv_kernel<Form::kF32, kRows, kCols>, g, b, 0, stream, a);
  } else if (a.w_fp8) {
    launch_kernel(fast_plain_gemv_kernel<Form::kFp8Twin, kRows, kCols>, g, b, 0, stream, a);
  } else {
    launch_kernel(fast_plain_gemv_kernel<Form::kBf16, kRows, kCols>, g, b, 0, stream, a);
  }
}

}  // namespace

bool fast_plain_gemv_takes(const ExactPlainArgs& a) {
  const bool pair_ok = a.w_b == nullptr || (aligned16(a.w_b) && a.y_b != nullptr && a.w_fp8 == nullptr);
  const bool twin_ok = a.w_fp8 == nullptr || (!a.w_f32 && a.w_fp8_scale && a.kg % 128 == 0 && a.ng % 128 == 0 &&
                                              reinterpret_cast<uintptr_t>(a.w_fp8) % 8 == 0);
  return a.rows <= kFastPlainGemvMaxRows && a.groups >= 1 && a.ng * a.groups == a.n && a.kg > 0 && a.kg % 8 == 0 &&
         a.x_ld % 8 == 0 && aligned16(a.x) && aligned16(a.w) && pair_ok && twin_ok;
}

void fast_plain_gemv(const ExactPlainArgs& a, cudaStream_t stream) {
  DSV4_CUDA_REQUIRE(fast_plain_gemv_takes(a), "fast plain gemv: unsupported call (rows, groups, K % 8, alignment)");
  if (a.rows == 0) return;
  if (a.rows <= kFewRows) return launch_form<kFewRows, 1>(a, stream);
  // A warp's two columns never straddle the pair's weights or a group when n and ng are even.
  if (a.n % 2 == 0 && a.ng % 2 == 0) return launch_form<kMaxRows, 2>(a, stream);
  launch_form<kMaxRows, 1>(a, stream);
}

}  // namespace dsv4::cuda
