// The fast tier's dense FP8 GEMM of a decode batch on wgmma, operands swapped (wgmma_few.h).
//
// Shared memory per K stage: the weight tile [128 rows][128 codes] and the call's rows [NR][128 codes],
// both K-major with the 128-byte swizzle wgmma's descriptors name (16-byte unit u of row r at unit
// u ^ (r % 8), 8-row groups 1024 bytes apart), then the rows' activation scales. One warpgroup copies a
// stage (cp.async), waits for its own copies, fences them into the async proxy and publishes the stage
// with a CTA barrier; three stages stay in flight while one is multiplied. A stage's weight copies are
// issued before its activations', the prologue's before the wait on the previous kernel (weights are
// never written during a step).
//
// The fragment: thread (warp w, lane l) holds, for each n8 block j of the rows and each m64 half h,
// weight rows h·64 + 16w + l/4 (+ 8) and call rows 8j + 2(l % 4) (+ 1): element 4j + 2i + c is weight
// row + 8i, call row + c.
#include <cuda_runtime.h>

#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/gemm/gemm_plan.h"
#include "backend/cuda/gemm/wgmma_few.h"
#include "backend/cuda/gemm_tiles.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/ptx.cuh"

namespace dsv4::cuda {
namespace {

using namespace gemm_tiles;

constexpr int kThreads = 128;  // one warpgroup
constexpr int kTile = 128;     // weight rows (output columns) a CTA: two m64 halves
constexpr int kStages = 4;
constexpr int kMaxKb = static_cast<int>(kFastMmaMaxK / 128);

template <int NR>
struct FewLayout {
  static constexpr int w = 0;                // e4m3 [kTile][128], swizzled
  static constexpr int x = w + kTile * 128;  // e4m3 [NR][128], swizzled
  static constexpr int sa = x + NR * 128;    // fp32 [NR]
  static constexpr int bytes = (sa + NR * 4 + 1023) / 1024 * 1024;
  static constexpr size_t smem = size_t{bytes} * kStages + 1024;  // + the base's alignment
  // After the K loop the ring holds the CTA's sums, fp32 [NR][kPitch] (call row major: the merge's
  // loads and stores run along the weight rows; the pad spreads the fragment's writes over the banks).
  static constexpr int kPitch = kTile + 4;
  static_assert(NR * kPitch * 4 <= bytes * kStages, "the sums must fit the ring");
};

#define DSV4_FEW_D8(i)                                                                                        \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
      "+f"(d[i + 7])
#define DSV4_FEW_PRED(n) "{\n.reg .pred p;\nsetp.ne.b32 p, %" #n ", 0;\n"

// d (+)= W[64 x 32] · X[32 x NR]ᵀ, both e4m3 from shared memory, fp32 out (the first K step with
// accumulate 0).
template <int NR>
__device__ __forceinline__ void wgmma_few_k32(float (&d)[NR / 2], uint64_t da, uint64_t db, int accumulate) {
  if constexpr (NR == 16) {
    asm volatile(DSV4_FEW_PRED(10) "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 "
                                   "{%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1;\n}\n"
                 : DSV4_FEW_D8(0)
                 : "l"(da), "l"(db), "r"(accumulate));
  } else if constexpr (NR == 32) {
    asm volatile(DSV4_FEW_PRED(18) "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 "
                                   "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
                                   "%16, %17, p, 1, 1;\n}\n"
                 : DSV4_FEW_D8(0), DSV4_FEW_D8(8)
                 : "l"(da), "l"(db), "r"(accumulate));
  } else {
    static_assert(NR == 64, "NR is 16, 32 or 64");
    asm volatile(DSV4_FEW_PRED(34) "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
                                   "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, "
                                   "%17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                                   "%32, %33, p, 1, 1;\n}\n"
                 : DSV4_FEW_D8(0), DSV4_FEW_D8(8), DSV4_FEW_D8(16), DSV4_FEW_D8(24)
                 : "l"(da), "l"(db), "r"(accumulate));
  }
}
#undef DSV4_FEW_PRED
#undef DSV4_FEW_D8

// Four consecutive sums of rank r's CTA (r == -1: this CTA's, without a cluster).
__device__ __forceinline__ float4 sums_at(const float* m, int r) {
  return r < 0 ? *reinterpret_cast<const float4*>(m) : ld_cluster(reinterpret_cast<const float4*>(m), r);
}

// Call row `row`'s four outputs at column `col` (a multiple of 4).
__device__ __forceinline__ void store4(const ExactBlockArgs& p, int64_t row, int64_t col, float4 v) {
  const int64_t at = row * p.y_ld + col;
  if (p.y_f32) {
    if ((reinterpret_cast<uintptr_t>(static_cast<float*>(p.y) + at) & 15) == 0) {
      *reinterpret_cast<float4*>(static_cast<float*>(p.y) + at) = v;
      return;
    }
  } else if ((reinterpret_cast<uintptr_t>(static_cast<uint16_t*>(p.y) + at) & 7) == 0) {
    const uint2 packed{uint32_t{f_to_bf16(v.x)} | (uint32_t{f_to_bf16(v.y)} << 16),
                       uint32_t{f_to_bf16(v.z)} | (uint32_t{f_to_bf16(v.w)} << 16)};
    *reinterpret_cast<uint2*>(static_cast<uint16_t*>(p.y) + at) = packed;
    return;
  }
  store_out(p.y, p.y_ld, p.y_f32, row, col, v.x);
  store_out(p.y, p.y_ld, p.y_f32, row, col + 1, v.y);
  store_out(p.y, p.y_ld, p.y_f32, row, col + 2, v.z);
  store_out(p.y, p.y_ld, p.y_f32, row, col + 3, v.w);
}

// The cluster's sums of this CTA's share of the tile (after every CTA left its own in `m`), added in
// split order and stored.
template <int NR>
__device__ __forceinline__ void merge_splits(const ExactBlockArgs& p, const float* m, int64_t n0, int split,
                                             int splits) {
  using L = FewLayout<NR>;
  constexpr int kUnits = NR * (kTile / 4);  // float4 units of the tile
  const int first = split * kUnits / splits, last = (split + 1) * kUnits / splits;
  for (int f = first + static_cast<int>(threadIdx.x); f < last; f += kThreads) {
    const int row = f / (kTile / 4), q = f % (kTile / 4);
    if (row >= p.rows) continue;
    const float* at = m + row * L::kPitch + 4 * q;
    float4 v = sums_at(at, splits > 1 ? 0 : -1);
    for (int s = 1; s < splits; ++s) {
      const float4 o = sums_at(at, s);
      v.x += o.x, v.y += o.y, v.z += o.z, v.w += o.w;
    }
    store4(p, row, n0 + 4 * q, v);
  }
}

template <int NR>
__global__ void __launch_bounds__(kThreads, 2) wgmma_few_kernel(const ExactBlockArgs p, int splits) {
  using L = FewLayout<NR>;
  extern __shared__ uint8_t smem_raw[];
  __shared__ float wscale[kMaxKb];  // the split's weight block scales
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int split = static_cast<int>(blockIdx.x);  // the CTA's rank in its cluster
  const int64_t n0 = int64_t{blockIdx.y} * kTile;
  const int nkb = static_cast<int>(p.kg / 128);
  const int kb0 = split * nkb / splits, nk = (split + 1) * nkb / splits - kb0;
  const uint8_t* w = static_cast<const uint8_t*>(p.w) + n0 * p.kg + int64_t{kb0} * 128;
  auto stage = [&](int i) { return smem + (i % kStages) * L::bytes; };
  auto issue_w = [&](int i) {  // the split's block i of the tile's weight rows
    uint8_t* st = stage(i) + L::w;
#pragma unroll
    for (int j = 0; j < kTile * 8 / kThreads; ++j) {
      const int q = tid + j * kThreads, r = q >> 3, u = q & 7;
      cp_async<16>(st + r * 128 + ((u ^ (r & 7)) << 4), w + r * p.kg + i * 128 + u * 16);
    }
  };
  auto issue_x = [&](int i) {  // its call rows' codes and scales (rows past the call zero)
    uint8_t* st = stage(i);
    const int64_t kb = kb0 + i;
#pragma unroll
    for (int j = 0; j < NR * 8 / kThreads; ++j) {
      const int q = tid + j * kThreads, r = q >> 3, u = q & 7;
      const bool ok = r < p.rows;
      cp_async<16>(st + L::x + r * 128 + ((u ^ (r & 7)) << 4), p.codes + (ok ? r : 0) * p.codes_ld + kb * 128 + u * 16,
                   ok ? 16 : 0);
    }
    if (tid < NR) {
      const bool ok = tid < p.rows;
      cp_async<4>(st + L::sa + tid * 4, p.scales + kb * p.scale_ld + (ok ? tid : 0), ok ? 4 : 0);
    }
  };
  for (int i = 0; i < kStages - 1 && i < nk; ++i) issue_w(i);
  for (int i = tid; i < nk; i += kThreads) wscale[i] = ue8m0_f(__ldg(p.w_scale + (n0 / 128) * nkb + kb0 + i));
  pdl_enter();
  for (int i = 0; i < kStages - 1; ++i) {  // group i: stage i's activations (group 0: every early weight too)
    if (i < nk) issue_x(i);
    cp_async_commit();
  }

  float acc[2][NR / 2], part[2][NR / 2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int e = 0; e < NR / 2; ++e) acc[h][e] = 0.0f;
  }
  for (int i = 0; i < nk; ++i) {
    // Stage i has landed (this thread's copies, fenced for wgmma) and every thread is done with stage
    // i - 1, whose buffer the copies of stage i + 3 take.
    cp_async_wait<kStages - 2>();
    fence_async_shared();
    __syncthreads();
    if (i + kStages - 1 < nk) {
      issue_w(i + kStages - 1);
      issue_x(i + kStages - 1);
    }
    cp_async_commit();
    const uint32_t base = smem_addr(stage(i));
    wgmma_fence();
    pin_registers(part[0]);
    pin_registers(part[1]);
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        wgmma_few_k32<NR>(part[h], sw128_desc(base + L::w + h * 64 * 128 + 32 * ks), sw128_desc(base + L::x + 32 * ks),
                          ks);
      }
    }
    wgmma_commit();
    wgmma_wait_all();
    pin_registers(part[0]);
    pin_registers(part[1]);
    const float sw = wscale[i];
    const float* sa = reinterpret_cast<const float*>(stage(i) + L::sa);
#pragma unroll
    for (int j = 0; j < NR / 8; ++j) {
      const float2 s = *reinterpret_cast<const float2*>(sa + 8 * j + 2 * (lane % 4));
      const float s0 = s.x * sw, s1 = s.y * sw;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float* a = acc[h] + 4 * j;
        const float* d = part[h] + 4 * j;
        a[0] = fmaf(d[0], s0, a[0]);
        a[1] = fmaf(d[1], s1, a[1]);
        a[2] = fmaf(d[2], s0, a[2]);
        a[3] = fmaf(d[3], s1, a[3]);
      }
    }
  }
  cp_async_wait_all();  // (the last groups are empty) no copy lands in the ring from here
  __syncthreads();      // every thread is done reading it
  float* m = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int e = 0; e < NR / 2; ++e) {
      const int row = 8 * (e / 4) + 2 * (lane % 4) + (e & 1), col = h * 64 + warp * 16 + lane / 4 + 8 * ((e / 2) & 1);
      m[row * L::kPitch + col] = acc[h][e];
    }
  }
  if (splits > 1) {
    cluster_arrive();
    cluster_wait();
  } else {
    __syncthreads();
  }
  merge_splits<NR>(p, m, n0, split, splits);
  if (splits > 1) {  // the others' reads of these sums are done before the CTA leaves
    cluster_arrive_relaxed();
    cluster_wait();
  }
}

template <int NR>
void launch(const ExactBlockArgs& a, int splits, cudaStream_t stream) {
  constexpr size_t smem = FewLayout<NR>::smem;
  allow_dynamic_smem(wgmma_few_kernel<NR>, smem);
  const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(a.n / kTile));
  launch_cluster_kernel(wgmma_few_kernel<NR>, grid, dim3(kThreads), static_cast<unsigned>(splits), smem, stream, a,
                        splits);
}

}  // namespace

bool wgmma_few_takes(const ExactBlockArgs& a) {
  return a.kind == GemmWeightKind::kFp8 && a.codes && a.scales && !a.offsets && a.groups == 1 && !a.w_b && a.w &&
         a.w_scale && a.rows >= 1 && a.rows <= kWgmmaFewMaxRows && a.n % kTile == 0 && a.n / kTile <= 65535 &&
         a.kg % 128 == 0 && a.kg > 0 && a.kg <= kFastMmaMaxK && a.ng == a.n && aligned16(a.w) && aligned16(a.codes) &&
         a.codes_ld % 16 == 0 && a.scale_ld >= a.rows && a.y && a.y_ld >= a.n;
}

void wgmma_few_gemm(const ExactBlockArgs& a, int splits, cudaStream_t stream) {
  DSV4_CUDA_REQUIRE(wgmma_few_takes(a), "wgmma few-row gemm: unsupported call (rows " + std::to_string(a.rows) +
                                            ", N " + std::to_string(a.n) + ", K " + std::to_string(a.kg) +
                                            ", or a pair, groups or alignment)");
  DSV4_CUDA_REQUIRE(splits >= 1 && splits <= kWgmmaFewMaxSplits && splits <= a.kg / 128,
                    "wgmma few-row gemm: " + std::to_string(splits) + " splits");
  if (a.rows <= 16) {
    launch<16>(a, splits, stream);
  } else if (a.rows <= 32) {
    launch<32>(a, splits, stream);
  } else {
    launch<64>(a, splits, stream);
  }
}

}  // namespace dsv4::cuda
