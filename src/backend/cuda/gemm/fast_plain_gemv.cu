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

constexpr int kWarps = 8, kThreads = kWarps * kWarp, kMaxRows = static_cast<int>(kFastPlainGemvMaxRows);

enum class Form { kF32, kBf16 };

// Eight values of weight row n at column k (a multiple of 8), fp32 or bf16.
template <Form F>
__device__ __forceinline__ void weight8(const ExactPlainArgs& p, const void* w, int64_t n, int64_t k, float (&v)[8]) {
  load_w8<F == Form::kF32>(static_cast<const char*>(w) + (n * p.kg + k) * (F == Form::kF32 ? 4 : 2), v);
}

// The total of a warp's 32 lane sums, in every lane: a fixed butterfly.
__device__ __forceinline__ float warp_total(float v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Output (r, n), fp32 or rounded to bf16.
__device__ __forceinline__ void store_one(const ExactPlainArgs& p, void* y, int64_t r, int64_t n, float v) {
  if (p.y_f32) {
    static_cast<float*>(y)[r * p.y_ld + n] = v;
  } else {
    static_cast<uint16_t*>(y)[r * p.y_ld + n] = f_to_bf16(v);
  }
}

// Output column n of every row: each row's 32 lane sums added in a fixed butterfly, stored by lane 0.
template <int kRows>
__device__ __forceinline__ void store_column(const ExactPlainArgs& p, const float (&acc)[kRows], int lane, void* y,
                                             int64_t n) {
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if (r >= p.rows) break;
    const float v = warp_total(acc[r]);
    if (lane == 0) store_one(p, y, r, n, v);
  }
}

// Columns [0, n) are the first weight's, [n, 2n) the pair's; column c of group c / ng reads that group's
// K columns of x. Parts warps share a column: part j chains the slices 8l + 256(j + Parts·i), and the
// parts' totals add in part order (shared memory), so that a narrow call (the MoE gate: 32-256 columns)
// still spreads its weight over most SMs with one or two loads in flight a lane.
template <Form F, int Parts>
__global__ void __launch_bounds__(kThreads) fast_plain_gemv_kernel(const ExactPlainArgs p) {
  constexpr int kColumns = kWarps / Parts;  // columns a CTA
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  const int part = warp % Parts;
  const int64_t col = int64_t{blockIdx.x} * kColumns + warp / Parts;
  const bool second = col >= p.n;
  const int64_t n = second ? col - p.n : col;
  const bool live = n < p.n && (!second || p.w_b);  // past the last column (or the pair's): no work
  const void* w = second ? p.w_b : p.w;
  const uint16_t* x = p.x + (live ? n / p.ng : 0) * p.kg;
  const int64_t k0 = 8 * (lane + kWarp * part), step = 8 * kWarp * Parts;
  const bool any = live && k0 < p.kg;
  float w0[8];  // the first slice's weights, loaded before the wait: no kernel of a step writes a weight
  if (any) weight8<F>(p, w, n, k0, w0);
  pdl_enter();
  if (Parts == 1 && !live) return;  // warp-uniform
  float acc[kMaxRows] = {};
  const auto add_slice = [&](int64_t k, const float(&wv)[8]) {
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r) {
      if (r >= p.rows) break;
      float xv[8];
      bf16x8(__ldg(reinterpret_cast<const uint4*>(x + r * p.x_ld + k)), xv);
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[r] = fmaf(xv[i], wv[i], acc[r]);
    }
  };
  if (any) add_slice(k0, w0);
#pragma unroll 4
  for (int64_t k = k0 + step; live && k < p.kg; k += step) {
    float wv[8];
    weight8<F>(p, w, n, k, wv);
    add_slice(k, wv);
  }
  void* y = second ? p.y_b : p.y;
  if constexpr (Parts == 1) {
    store_column(p, acc, lane, y, n);
  } else {
    __shared__ float totals[kWarps][kMaxRows];
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r) {
      if (r >= p.rows) break;
      const float v = warp_total(acc[r]);
      if (lane == 0) totals[warp][r] = v;
    }
    __syncthreads();
    if (!live || part != 0 || lane >= p.rows) return;
    float v = totals[warp][lane];
#pragma unroll
    for (int j = 1; j < Parts; ++j) v += totals[warp + j][lane];
    store_one(p, y, lane, n, v);
  }
}

// A bf16 weight's FP8 twin (wo_a), a warp an output column: lane l reads the 16 codes at 16l + 512j (one
// 128-wide scale block's) in one load, chains their products with each row's x in fp32 from 0, then adds
// the chain times the block's scale 2^s to the row's sum. Scaling by a power of two is exact, so the
// products are those of the bf16 values bf16(e4m3 · 2^s) (wherever that value is a normal bf16), summed
// block by block (spec/NUMERICS.md "fast": fp32 sums in any fixed order); per code a conversion and the
// multiply-adds, where dequantizing each value first cost several instructions more (22.6 against 16.0 us
// for wo_a at one row on the H100).
// A lane's first kTwinAhead code loads are in flight before the wait (weights are constant in a step),
// the rest kTwinAhead ahead of their use. Calls of up to kTwinStagedRows rows (decode's) stage the CTA's
// group of x (its 8 columns share one: ng % 128 == 0) once as fp32 in shared memory, where every warp
// widened it again from L1 (a quarter of the kernel's instructions); 4 pad floats after every 16 put a
// quarter-warp's 16-byte reads, 64 bytes apart, on distinct banks. Their two sums a lane keep the kernel
// at four CTAs an SM; more rows read x from L1 as before.
constexpr int kTwinAhead = 3, kTwinStagedRows = 2;
constexpr int64_t kTwinStageBytes = 48 * 1024;

__host__ __device__ constexpr int64_t twin_stage_floats(int64_t rows, int64_t kg) { return rows * (kg + kg / 4); }

template <int kRows>
__global__ void __launch_bounds__(kThreads, kRows == kTwinStagedRows ? 4 : 1)
    fast_twin_gemv_kernel(const ExactPlainArgs p) {
  constexpr bool kStaged = kRows == kTwinStagedRows;
  constexpr int kStep = 16 * kWarp;  // a warp's codes a block j; lane l's at 16l + kStep·j
  extern __shared__ float4 xs4[];
  const int lane = static_cast<int>(threadIdx.x) % kWarp, kg = static_cast<int>(p.kg);
  const int64_t first = int64_t{blockIdx.x} * kWarps, n = first + static_cast<int>(threadIdx.x) / kWarp;
  const bool live = n < p.n;
  const int blocks = live ? (kg - 16 * lane + kStep - 1) / kStep : 0;  // kg % 128 == 0: lane's last is whole
  const uint8_t* codes = p.w_fp8 + (live ? n : 0) * p.kg + 16 * lane;
  const uint8_t* scales = p.w_fp8_scale + (live ? n / 128 : 0) * (kg / 128) + lane / 8;
  uint4 c[kTwinAhead] = {};
  uint8_t s[kTwinAhead] = {};
#pragma unroll
  for (int i = 0; i < kTwinAhead; ++i)
    if (i < blocks) c[i] = __ldg(reinterpret_cast<const uint4*>(codes + i * kStep)), s[i] = scales[4 * i];
  pdl_enter();
  const int padded = static_cast<int>(twin_stage_floats(1, kg));  // a staged row's floats
  if constexpr (kStaged) {                                        // the CTA's first column is live (grid = ceil(n / 8))
    const uint16_t* xg = p.x + first / p.ng * p.kg;
    float* xs = reinterpret_cast<float*>(xs4);
    for (int i = 8 * static_cast<int>(threadIdx.x); i < static_cast<int>(p.rows) * kg; i += 8 * kThreads) {
      const int r = i / kg, k = i % kg;
      float v[8];
      bf16x8(__ldg(reinterpret_cast<const uint4*>(xg + r * p.x_ld + k)), v);
      float4* dst = reinterpret_cast<float4*>(xs + r * padded + k + k / 16 * 4);
      dst[0] = make_float4(v[0], v[1], v[2], v[3]), dst[1] = make_float4(v[4], v[5], v[6], v[7]);
    }
    __syncthreads();
  }
  if (!live) return;  // warp-uniform
  const uint16_t* x = p.x + n / p.ng * p.kg + 16 * lane;
  const float* xl = reinterpret_cast<const float*>(xs4) + 20 * lane;  // 16 values + 4 pad a lane
  float acc[kRows] = {};
  const auto add_block = [&](int j, uint4 cw, uint8_t scale) {
    const uint32_t words[4] = {cw.x, cw.y, cw.z, cw.w};
    float wv[16];
#pragma unroll
    for (int h = 0; h < 8; ++h) {  // two codes a conversion (e4m3 -> f16 is exact)
      const auto two = static_cast<__nv_fp8x2_storage_t>((words[h / 2] >> (16 * (h % 2))) & 0xffffu);
      const float2 f = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(two, __NV_E4M3)));
      wv[2 * h] = f.x, wv[2 * h + 1] = f.y;
    }
    const float sc = gemm_tiles::ue8m0_f(scale);  // byte 0: 2^-127
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (r >= p.rows) break;
      float xv[16];
      if constexpr (kStaged) {
        const float4* src = reinterpret_cast<const float4*>(xl + r * padded + j * (kStep + kStep / 4));
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const float4 f = src[q];
          xv[4 * q] = f.x, xv[4 * q + 1] = f.y, xv[4 * q + 2] = f.z, xv[4 * q + 3] = f.w;
        }
      } else {
        const uint16_t* xr = x + r * p.x_ld + j * kStep;
        bf16x8(__ldg(reinterpret_cast<const uint4*>(xr)), reinterpret_cast<float(&)[8]>(xv[0]));
        bf16x8(__ldg(reinterpret_cast<const uint4*>(xr + 8)), reinterpret_cast<float(&)[8]>(xv[8]));
      }
      float chain = 0.0f;
#pragma unroll
      for (int i = 0; i < 16; ++i) chain = fmaf(xv[i], wv[i], chain);
      acc[r] = fmaf(chain, sc, acc[r]);
    }
  };
  for (int j0 = 0; j0 < blocks; j0 += kTwinAhead) {
#pragma unroll
    for (int i = 0; i < kTwinAhead; ++i) {
      const int j = j0 + i, jn = j + kTwinAhead;
      if (j >= blocks) break;
      const uint4 cw = c[i];
      const uint8_t sw = s[i];
      if (jn < blocks) c[i] = __ldg(reinterpret_cast<const uint4*>(codes + jn * kStep)), s[i] = scales[4 * jn];
      add_block(j, cw, sw);
    }
  }
  store_column(p, acc, lane, p.y, n);
}

template <Form F>
void launch_parts(const ExactPlainArgs& a, int k_parts, unsigned grid, cudaStream_t stream) {
  switch (k_parts) {
    case 1:
      launch_kernel(fast_plain_gemv_kernel<F, 1>, grid, kThreads, 0, stream, a);
      break;
    case 2:
      launch_kernel(fast_plain_gemv_kernel<F, 2>, grid, kThreads, 0, stream, a);
      break;
    case 4:
      launch_kernel(fast_plain_gemv_kernel<F, 4>, grid, kThreads, 0, stream, a);
      break;
    default:
      launch_kernel(fast_plain_gemv_kernel<F, 8>, grid, kThreads, 0, stream, a);
  }
}

}  // namespace

bool fast_plain_gemv_takes(const ExactPlainArgs& a) {
  const bool pair_ok = a.w_b == nullptr || (aligned16(a.w_b) && a.y_b != nullptr && a.w_fp8 == nullptr);
  const bool twin_ok = a.w_fp8 == nullptr || (!a.w_f32 && a.w_fp8_scale && a.kg % 128 == 0 && a.ng % 128 == 0 &&
                                              reinterpret_cast<uintptr_t>(a.w_fp8) % 16 == 0);
  return a.rows <= kFastPlainGemvMaxRows && a.groups >= 1 && a.ng * a.groups == a.n && a.kg > 0 && a.kg % 8 == 0 &&
         a.x_ld % 8 == 0 && aligned16(a.x) && aligned16(a.w) && pair_ok && twin_ok;
}

void fast_plain_gemv(const ExactPlainArgs& a, int k_parts, cudaStream_t stream) {
  DSV4_CUDA_REQUIRE(fast_plain_gemv_takes(a), "fast plain gemv: unsupported call (rows, groups, K % 8, alignment)");
  DSV4_CUDA_REQUIRE(k_parts == 1 || k_parts == 2 || k_parts == 4 || k_parts == 8,
                    "fast plain gemv: k_parts 1, 2, 4 or 8");
  DSV4_CUDA_REQUIRE(k_parts == 1 || !a.w_fp8, "fast plain gemv: an FP8 twin runs a warp a column");
  if (a.rows == 0) return;
  const int64_t cols = (a.w_b ? 2 : 1) * a.n, grid = (cols * k_parts + kWarps - 1) / kWarps;
  DSV4_CUDA_REQUIRE(grid < (int64_t{1} << 31), "fast plain gemv: grid out of range");
  const auto g = static_cast<unsigned>(grid);
  if (a.w_fp8) {
    const size_t staged = static_cast<size_t>(twin_stage_floats(a.rows, a.kg)) * sizeof(float);
    if (a.rows <= kTwinStagedRows && staged <= static_cast<size_t>(kTwinStageBytes)) {
      launch_kernel(fast_twin_gemv_kernel<kTwinStagedRows>, g, kThreads, staged, stream, a);
    } else {
      launch_kernel(fast_twin_gemv_kernel<kMaxRows>, g, kThreads, 0, stream, a);
    }
  } else if (a.w_f32) {
    launch_parts<Form::kF32>(a, k_parts, g, stream);
  } else {
    launch_parts<Form::kBf16>(a, k_parts, g, stream);
  }
}

}  // namespace dsv4::cuda
