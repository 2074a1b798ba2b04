// The fast tier's fp32-weight GEMM (fast_sgemm.h).
//
// Per 16-wide K tile the CTA stages x (bf16 widened to fp32) and W (fp32, or bf16 widened) transposed in shared memory
// ([k][row], padded), two buffers: the next tile's global loads are in registers while the current
// tile is multiplied, and one barrier a tile publishes it. Thread (ty, tx) owns rows ty·4 + {0..3}
// and 64 + ty·4 + {0..3}, columns tx·4 + {0..3} and 64 + tx·4 + {0..3}: a warp's four 16-byte
// fragment loads are broadcasts or contiguous, 64 fused multiply-adds each.
#include <cuda_runtime.h>

#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/gemm/fast_sgemm.h"
#include "backend/cuda/gemm/plain_loads.cuh"
#include "backend/cuda/launch.cuh"

namespace dsv4::cuda {
namespace {

constexpr int kBM = 128, kBN = 128, kBK = 16, kThreads = 256, kPad = 4;

struct Tiles {
  alignas(16) float a[2][kBK][kBM + kPad];
  alignas(16) float b[2][kBK][kBN + kPad];
};

// Four outputs of one row at columns col..col+3 (those below n).
__device__ __forceinline__ void store4(const ExactPlainArgs& p, void* y, int64_t row, int64_t col, const float* v) {
  const int64_t i = row * p.y_ld + col;
  if (p.y_f32 && col + 3 < p.n && (reinterpret_cast<uintptr_t>(static_cast<float*>(y) + i) & 15u) == 0) {
    *reinterpret_cast<float4*>(static_cast<float*>(y) + i) = make_float4(v[0], v[1], v[2], v[3]);
    return;
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    if (col + j >= p.n) break;
    if (p.y_f32) {
      static_cast<float*>(y)[i + j] = v[j];
    } else {
      static_cast<uint16_t*>(y)[i + j] = f_to_bf16(v[j]);
    }
  }
}

template <bool kF32>
__global__ void __launch_bounds__(kThreads, 2) fast_sgemm_kernel(const ExactPlainArgs p) {
  using W = std::conditional_t<kF32, float, uint16_t>;
  __shared__ Tiles sm;
  pdl_enter();
  const W* w = static_cast<const W*>(blockIdx.z ? p.w_b : p.w);
  void* y = blockIdx.z ? p.y_b : p.y;
  const int64_t m0 = int64_t{blockIdx.y} * kBM, n0 = int64_t{blockIdx.x} * kBN;
  const int tid = static_cast<int>(threadIdx.x), tx = tid % 16, ty = tid / 16;
  // Loads: thread tid stages row tid / 2 of both tiles, K half (tid % 2) · 8.
  const int lr = tid >> 1, kh = (tid & 1) * 8;
  const bool x_ok = m0 + lr < p.rows, w_ok = n0 + lr < p.n;
  const uint16_t* xp = p.x + (m0 + (x_ok ? lr : 0)) * p.x_ld + kh;
  const W* wp = w + (n0 + (w_ok ? lr : 0)) * p.kg + kh;
  uint4 xr = make_uint4(0, 0, 0, 0);
  float wv[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  auto fetch = [&](int64_t k0) {
    if (x_ok) xr = *reinterpret_cast<const uint4*>(xp + k0);
    if (w_ok) load_w8<kF32>(wp + k0, wv);
  };
  auto stash = [&](int buf) {
    float xv[8];
    bf16x8(xr, xv);
#pragma unroll
    for (int j = 0; j < 8; ++j) sm.a[buf][kh + j][lr] = xv[j];
#pragma unroll
    for (int j = 0; j < 8; ++j) sm.b[buf][kh + j][lr] = wv[j];
  };

  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;
  }
  const int64_t nk = p.kg / kBK;
  fetch(0);
  stash(0);
  __syncthreads();
  for (int64_t kt = 0; kt < nk; ++kt) {
    const int buf = static_cast<int>(kt & 1);
    if (kt + 1 < nk) fetch((kt + 1) * kBK);
#pragma unroll
    for (int k = 0; k < kBK; ++k) {
      const float4 a0 = *reinterpret_cast<const float4*>(&sm.a[buf][k][ty * 4]);
      const float4 a1 = *reinterpret_cast<const float4*>(&sm.a[buf][k][64 + ty * 4]);
      const float4 b0 = *reinterpret_cast<const float4*>(&sm.b[buf][k][tx * 4]);
      const float4 b1 = *reinterpret_cast<const float4*>(&sm.b[buf][k][64 + tx * 4]);
      const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
      for (int i = 0; i < 8; ++i) {
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
      }
    }
    if (kt + 1 < nk) stash(buf ^ 1);  // buffer buf ^ 1 was last read before the previous barrier
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int64_t row = m0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4);
    if (row >= p.rows) continue;
    store4(p, y, row, n0 + tx * 4, &acc[i][0]);
    store4(p, y, row, n0 + 64 + tx * 4, &acc[i][4]);
  }
}

}  // namespace

bool fast_sgemm_takes(const ExactPlainArgs& a) {
  const bool pair_ok = a.w_b == nullptr || (aligned16(a.w_b) && a.y_b != nullptr);
  return a.groups == 1 && a.ng == a.n && a.kg > 0 && a.kg % kBK == 0 && a.x_ld % 8 == 0 && aligned16(a.x) &&
         aligned16(a.w) && pair_ok;
}

void fast_sgemm(const ExactPlainArgs& a, cudaStream_t stream) {
  DSV4_CUDA_REQUIRE(fast_sgemm_takes(a), "fast sgemm: unsupported call (one group, K % 16, alignment)");
  if (a.rows == 0) return;
  const dim3 grid(static_cast<unsigned>((a.n + kBN - 1) / kBN), static_cast<unsigned>((a.rows + kBM - 1) / kBM),
                  a.w_b ? 2u : 1u);
  if (a.w_f32) {
    launch_kernel(fast_sgemm_kernel<true>, grid, dim3(kThreads), 0, stream, a);
  } else {
    launch_kernel(fast_sgemm_kernel<false>, grid, dim3(kThreads), 0, stream, a);
  }
}

}  // namespace dsv4::cuda
