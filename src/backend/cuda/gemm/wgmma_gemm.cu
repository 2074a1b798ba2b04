// The fast tier's block-scaled GEMM on wgmma (wgmma_gemm.h).
//
// Shared memory per K stage: the activation tile [128 rows][128 codes] and the weight tile
// [256 columns][128 codes], both K-major with the 128-byte swizzle that wgmma's descriptors name
// (16-byte unit u of row r stored at unit u ^ (r % 8), 8-row groups 1024 bytes apart), the
// activations' scales, and for FP4 the packed codes and ue8m0 scales as loaded plus the row blocks'
// fp32 scales. Every thread copies a share of each stage (cp.async), waits for its own copies,
// fences them into the async proxy that wgmma reads through, and a CTA barrier publishes the stage.
// Four stages (FP8) or three (FP4) fit: three or two K blocks in flight while one is multiplied.
// 256 columns a tile read each activation block once for twice the multiplies of a 128-column tile.
//
// A warpgroup multiplies its 64 rows by the block's two 128-column halves in turn: four k32 wgmmas
// into a fresh fragment (the first with scale-d 0), waited for, then promoted into that half's
// accumulator: acc = fmaf(block, sa · sw, acc) per element, as gemm/fast_mma.cu.
// FP4: while block kb's first half is on the tensor cores the CTA widens block kb + 1's codes.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/gemm/fp4_shift.h"
#include "backend/cuda/gemm/fp4_widen.h"
#include "backend/cuda/gemm/gemm_plan.h"
#include "backend/cuda/gemm/wgmma_gemm.h"
#include "backend/cuda/gemm_tiles.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/ptx.cuh"

namespace dsv4::cuda {
namespace {

using namespace gemm_tiles;

constexpr int kBM = 128, kBN = 256;  // rows and output columns of a CTA
constexpr int kHalf = 128;           // output columns of one wgmma (a warpgroup multiplies kBN in two)
constexpr int kThreads = 256;        // two warpgroups

// What the weight tile arrives as: FP8 codes with 128x128 block scales, packed FP4 codes and ue8m0
// scales widened in shared memory, or FP4 widened beforehand (e5m2 codes and row-block scales).
enum class BForm { kFp8, kFp4, kWide };

// Byte offsets inside one stage; every tile that wgmma reads starts on a 1024-byte boundary.
template <BForm F>
struct StageLayout {
  static constexpr bool kFp4 = F == BForm::kFp4;
  static constexpr bool kRowScales = F != BForm::kFp8;    // a scale per weight row and K block
  static constexpr int a = 0;                             // e4m3 [kBM][128], swizzled
  static constexpr int b = a + kBM * 128;                 // e4m3 / e5m2 [kBN][128], swizzled
  static constexpr int raw = b + kBN * 128;               // FP4: packed codes [kBN][64]
  static constexpr int sa = raw + (kFp4 ? kBN * 64 : 0);  // fp32 [kBM] activation scales
  static constexpr int sraw = sa + kBM * 4;               // FP4: ue8m0 [kBN][4]
  static constexpr int sb = sraw + (kFp4 ? kBN * 4 : 0);  // FP4, wide: fp32 [kBN] row-block scales
  static constexpr int bytes = (sb + (kRowScales ? kBN * 4 : 0) + 1023) / 1024 * 1024;
  static constexpr int kStages = kFp4 ? 3 : 4;                    // as many as fit in 227 KB
  static constexpr size_t smem = size_t{bytes} * kStages + 1024;  // + the base's alignment
};

#define DSV4_WG_D8(i)                                                                                         \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
      "+f"(d[i + 7])
#define DSV4_WG_REGS                                                                                           \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
  "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "  \
  "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

// d (+)= A[64 x 32] · B[32 x 128]: A e4m3, B e4m3 (FP8 weights) or e5m2 (widened FP4), fp32 out.
#define DSV4_WGMMA_K32(btype)                                                                                         \
  asm volatile(                                                                                                       \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                                    \
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3." btype " " DSV4_WG_REGS ", %64, %65, p, 1, 1;\n}\n"          \
      : DSV4_WG_D8(0), DSV4_WG_D8(8), DSV4_WG_D8(16), DSV4_WG_D8(24), DSV4_WG_D8(32), DSV4_WG_D8(40), DSV4_WG_D8(48), \
        DSV4_WG_D8(56)                                                                                                \
      : "l"(da), "l"(db), "r"(accumulate))
template <bool kE5m2>
__device__ __forceinline__ void wgmma_k32(float (&d)[64], uint64_t da, uint64_t db, int accumulate) {
  if constexpr (kE5m2) {
    DSV4_WGMMA_K32("e5m2");
  } else {
    DSV4_WGMMA_K32("e4m3");
  }
}
#undef DSV4_WGMMA_K32
#undef DSV4_WG_D8
#undef DSV4_WG_REGS

struct Work {
  Tile t;
  int64_t n0 = 0;  // first output column
  const uint8_t* w = nullptr;
  const uint8_t* ws = nullptr;  // FP8, FP4: the weight's scales as stored
  const float* wsf = nullptr;   // wide: the row-block scales
  void* y = nullptr;
};

// The CTA's rows (blockIdx.y: a dense row tile or one of the experts' tiles), columns and weight.
__device__ __forceinline__ bool find_work(const ExactBlockArgs& p, int n_tiles, Work& k) {
  if (p.offsets) {
    if (!find_expert_tile(p.offsets, p.experts, kBM, blockIdx.y, k.t)) return false;
  } else {
    k.t.r0 = int64_t{blockIdx.y} * kBM;
    k.t.cnt = static_cast<int>(imin(kBM, p.rows - k.t.r0));
    k.t.e = 0;
  }
  const bool second = static_cast<int>(blockIdx.x) >= n_tiles;
  k.n0 = int64_t{static_cast<int>(blockIdx.x) % n_tiles} * kBN;
  if (p.offsets) {
    k.w = static_cast<const uint8_t*>((second ? p.w_list_b : p.w_list)[k.t.e]);
    k.ws = (second ? p.w_scale_list_b : p.w_scale_list)[k.t.e];
  } else {
    k.w = static_cast<const uint8_t*>(second ? p.w_b : p.w);
    k.ws = second ? p.w_scale_b : p.w_scale;
  }
  if (p.wide) {  // widened beforehand: the slot of this expert (or of the dense weight) and half
    const int64_t slot = (second ? p.wide_slots : 0) + k.t.e;
    k.w = p.wide + slot * p.n * p.kg;
    k.wsf = p.wide_scale + slot * p.n * (p.kg / 128);
  }
  k.y = second ? p.y_b : p.y;
  return k.t.cnt > 0;
}

// Issues the copies of K block kb into stage st (rows past the tile and columns past N zero-filled).
template <BForm F>
__device__ __forceinline__ void load_stage(const ExactBlockArgs& p, const Work& k, int64_t kb, uint8_t* st) {
  using L = StageLayout<F>;
  const int tid = static_cast<int>(threadIdx.x);
#pragma unroll
  for (int i = 0; i < kBM * 8 / kThreads; ++i) {
    const int q = tid + i * kThreads, r = q >> 3, u = q & 7;
    const bool ok = r < k.t.cnt;
    const uint8_t* src = p.codes + (k.t.r0 + (ok ? r : 0)) * p.codes_ld + kb * 128 + u * 16;
    cp_async<16>(st + L::a + r * 128 + ((u ^ (r & 7)) << 4), src, ok ? 16 : 0);
  }
  if constexpr (!L::kFp4) {
#pragma unroll
    for (int i = 0; i < kBN * 8 / kThreads; ++i) {
      const int q = tid + i * kThreads, r = q >> 3, u = q & 7;
      const bool ok = k.n0 + r < p.n;
      const uint8_t* src = k.w + (k.n0 + (ok ? r : 0)) * p.kg + kb * 128 + u * 16;
      cp_async<16>(st + L::b + r * 128 + ((u ^ (r & 7)) << 4), src, ok ? 16 : 0);
    }
    if constexpr (F == BForm::kWide) {
      if (tid < kBN) {
        const bool ok = k.n0 + tid < p.n;
        cp_async<4>(st + L::sb + tid * 4, k.wsf + (k.n0 + (ok ? tid : 0)) * (p.kg / 128) + kb, ok ? 4 : 0);
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < kBN * 4 / kThreads; ++i) {
      const int q = tid + i * kThreads, r = q >> 2, u = q & 3;
      const bool ok = k.n0 + r < p.n;
      const uint8_t* src = k.w + (k.n0 + (ok ? r : 0)) * (p.kg / 2) + kb * 64 + u * 16;
      cp_async<16>(st + L::raw + r * 64 + u * 16, src, ok ? 16 : 0);
    }
    if (tid < kBN) {
      const bool ok = k.n0 + tid < p.n;
      const uint8_t* src = k.ws + (k.n0 + (ok ? tid : 0)) * (p.kg / 32) + kb * 4;
      cp_async<4>(st + L::sraw + tid * 4, src, ok ? 4 : 0);
    }
  }
  if (tid >= kThreads - kBM) {
    const int r = tid - (kThreads - kBM);
    const bool ok = r < k.t.cnt;
    cp_async<4>(st + L::sa + r * 4, p.scales + kb * p.scale_ld + k.t.r0 + (ok ? r : 0), ok ? 4 : 0);
  }
}

// FP4: the stage's packed codes widened into its swizzled weight tile, and each row block's scale
// 2^(max of its four ue8m0 exponents − 127 − 13), by table words (fp4_shift.h): a thread's 32-wide
// block gets its shifted table once, the row block's largest scale byte comes from comparisons and its
// scale from bits (the row's first thread, which reports a span past 26 octaves), and shared memory is
// read and written by 32-bit addresses.
__device__ __forceinline__ void widen_stage(uint32_t st, int32_t* err) {
  using L = StageLayout<BForm::kFp4>;
  const int tid = static_cast<int>(threadIdx.x);
#pragma unroll
  for (int q = tid; q < kBN * 4; q += kThreads) {  // this loop form: no spill at 255 registers (the index form: 8 B)
    const int r = q >> 2, u = q & 3;
    const uint32_t sw = lds_u32(st + L::sraw + r * 4), top = max_byte(sw);
    if (u == 0) {
      if (top != 255u && top - min_byte(sw) > 26u) report(err, DeviceError::kGemmFp4Span);
      sts_u32(st + L::sb + r * 4, fp4_block_scale_bits(top));
    }
    const Fp8Table t = e5m2_table(static_cast<int>((sw >> (8 * u)) & 255u) - static_cast<int>(top) + 13);
    const uint4 v = lds_v4(st + L::raw + r * 64 + u * 16);
    const HalfWords c0 = e2m1x8_by_table(v.x, t), c1 = e2m1x8_by_table(v.y, t);
    const HalfWords c2 = e2m1x8_by_table(v.z, t), c3 = e2m1x8_by_table(v.w, t);
    const uint32_t row = st + L::b + r * 128;
    sts_v4(row + (((2 * u) ^ (r & 7)) << 4), c0.lo, c0.hi, c1.lo, c1.hi);
    sts_v4(row + (((2 * u + 1) ^ (r & 7)) << 4), c2.lo, c2.hi, c3.lo, c3.hi);
  }
}

// One K block on the tensor cores: four k32 wgmmas into `part`, waited for. kOverlap runs on the
// CUDA cores between the issue and the wait (it must not touch `part`).
template <bool kE5m2, typename Overlap>
__device__ __forceinline__ void multiply_block(uint32_t a_tile, uint32_t b_tile, float (&part)[64], Overlap&& overlap) {
  wgmma_fence();
  pin_registers(part);
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) wgmma_k32<kE5m2>(part, sw128_desc(a_tile + 32 * ks), sw128_desc(b_tile + 32 * ks), ks);
  wgmma_commit();
  overlap();
  wgmma_wait_all();
  pin_registers(part);
}

// Output pair (v0, v1) at (row, col), (row, col + 1), within the tile's rows and N.
__device__ __forceinline__ void store_pair(const ExactBlockArgs& p, void* y, int64_t row, int64_t col, float v0,
                                           float v1) {
  if (!p.y_f32 && col + 1 < p.n && ((row * p.y_ld + col) & 1) == 0) {
    const uint32_t packed = uint32_t{f_to_bf16(v0)} | (uint32_t{f_to_bf16(v1)} << 16);
    *reinterpret_cast<uint32_t*>(static_cast<uint16_t*>(y) + row * p.y_ld + col) = packed;
    return;
  }
  if (col < p.n) store_out(y, p.y_ld, p.y_f32, row, col, v0);
  if (col + 1 < p.n) store_out(y, p.y_ld, p.y_f32, row, col + 1, v1);
}

// One half's block sums promoted: acc += part · sa · sw, sw the FP8 block scale or (row scales) each
// column's row-block scale from sb (the half's 128 fp32 values).
template <bool kRowScales>
__device__ __forceinline__ void promote(float* acc, const float (&part)[64], float s0, float s1, float sw, uint32_t sb,
                                        int lane) {
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    float b0 = sw, b1 = sw;
    if constexpr (kRowScales) {
      const float2 b = lds_f2(sb + (8 * j + 2 * (lane % 4)) * 4);
      b0 = b.x, b1 = b.y;
    }
    float* d = acc + 4 * j;
    d[0] = fmaf(part[4 * j + 0], s0 * b0, d[0]);
    d[1] = fmaf(part[4 * j + 1], s0 * b1, d[1]);
    d[2] = fmaf(part[4 * j + 2], s1 * b0, d[2]);
    d[3] = fmaf(part[4 * j + 3], s1 * b1, d[3]);
  }
}

// A warpgroup's 64 rows x 256 columns of the tile from its accumulators (rows rl, rl + 8 a fragment).
__device__ __forceinline__ void store_tile(const ExactBlockArgs& p, const Work& k, const float (&acc)[2 * 64], int rl,
                                           int lane) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int64_t col = k.n0 + h * kHalf + 8 * j + 2 * (lane % 4);
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int r = rl + 8 * i;
        const float* d = acc + 64 * h + 4 * j + 2 * i;
        if (r < k.t.cnt) store_pair(p, k.y, k.t.r0 + r, col, d[0], d[1]);
      }
    }
  }
}

template <BForm F>
__global__ void __launch_bounds__(kThreads, 1) wgmma_kernel(const ExactBlockArgs p, int n_tiles, int32_t* err) {
  using L = StageLayout<F>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  pdl_enter();
  Work k;
  if (!find_work(p, n_tiles, k)) return;  // CTA-uniform

  const int tid = static_cast<int>(threadIdx.x), wg = tid / 128, warp = (tid / 32) % 4, lane = tid % 32;
  const int64_t nkb = p.kg / 128;
  constexpr int kStages = L::kStages;
  auto stage = [&](int64_t kb) { return smem + (kb % kStages) * L::bytes; };
  for (int64_t kb = 0; kb < kStages - 1; ++kb) {
    if (kb < nkb) load_stage<F>(p, k, kb, stage(kb));
    cp_async_commit();
  }
  if constexpr (L::kFp4) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    widen_stage(smem_addr(stage(0)), err);
    fence_async_shared();
    __syncthreads();
  }

  const int rl = wg * 64 + warp * 16 + lane / 4;  // this thread's rows rl and rl + 8 of the tile
  const bool second_half = k.n0 + kHalf < p.n;    // CTA-uniform: past N the second half is skipped
  float acc[2 * 64], part[64];
#pragma unroll
  for (int i = 0; i < 2 * 64; ++i) acc[i] = 0.0f;
  for (int64_t kb = 0; kb < nkb; ++kb) {
    uint8_t* st = stage(kb);
    if constexpr (!L::kFp4) {
      cp_async_wait<kStages - 2>();
      fence_async_shared();
      __syncthreads();
    }
    if (kb + kStages - 1 < nkb) load_stage<F>(p, k, kb + kStages - 1, stage(kb + kStages - 1));
    cp_async_commit();
    const uint32_t base = smem_addr(st);
    const float* sa = reinterpret_cast<const float*>(st + L::sa);
    const float s0 = sa[rl], s1 = sa[rl + 8];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (h == 1 && !second_half) break;
      float sw = 0.0f;  // FP8: the weight's 128x128 block scale
      if constexpr (F == BForm::kFp8) sw = ue8m0_f(k.ws[(k.n0 / 128 + h) * nkb + kb]);
      multiply_block<L::kRowScales>(base + L::a + wg * 64 * 128, base + L::b + h * kHalf * 128, part, [&] {
        if constexpr (L::kFp4) {
          if (h == 0 && kb + 1 < nkb) {
            cp_async_wait<kStages - 2>();
            __syncthreads();
            widen_stage(smem_addr(stage(kb + 1)), err);
            fence_async_shared();
          }
        }
      });
      promote<L::kRowScales>(acc + 64 * h, part, s0, s1, sw, base + L::sb + h * kHalf * 4, lane);
    }
    if constexpr (L::kFp4) __syncthreads();  // the widened block kb + 1 is published; stage kb is free
  }
  cp_async_wait_all();
  store_tile(p, k, acc, rl, lane);
}

// `a` with its experts [e0, e0 + n): their offsets and weight lists (the dense call is its one weight).
ExactBlockArgs expert_slice(const ExactBlockArgs& a, int e0, int n) {
  if (!a.offsets) return a;
  ExactBlockArgs s = a;
  s.offsets = a.offsets + e0;
  s.experts = n;
  s.w_list = a.w_list + e0;
  s.w_scale_list = a.w_scale_list + e0;
  if (a.w_list_b) s.w_list_b = a.w_list_b + e0;
  if (a.w_scale_list_b) s.w_scale_list_b = a.w_scale_list_b + e0;
  return s;
}

template <BForm F>
void launch(const ExactBlockArgs& a, int32_t* err, cudaStream_t stream) {
  constexpr size_t smem = StageLayout<F>::smem;
  allow_dynamic_smem(wgmma_kernel<F>, smem);
  const int n_tiles = static_cast<int>(cdiv(a.n, kBN));
  const int64_t m_tiles = a.offsets ? row_tiles(a.rows, kBM, a.experts) : cdiv(a.rows, kBM);
  DSV4_CUDA_REQUIRE(m_tiles <= 65535, "wgmma gemm: " + std::to_string(m_tiles) + " row tiles exceed the grid");
  const dim3 grid(static_cast<unsigned>(n_tiles * (has_pair(a) ? 2 : 1)), static_cast<unsigned>(m_tiles));
  launch_kernel(wgmma_kernel<F>, grid, dim3(kThreads), smem, stream, a, n_tiles, err);
}

}  // namespace

bool wgmma_takes(const ExactBlockArgs& a) {
  const bool kind_ok = a.kind == GemmWeightKind::kFp8 || a.kind == GemmWeightKind::kFp4;
  const bool dense_ok = a.offsets != nullptr || (aligned16(a.w) && (a.w_b == nullptr || aligned16(a.w_b)));
  return kind_ok && a.codes && a.scales && a.groups == 1 && a.kg > 0 && a.kg % 128 == 0 && a.ng == a.n &&
         aligned16(a.codes) && a.codes_ld % 16 == 0 && dense_ok;
}

void wgmma_gemm(const ExactBlockArgs& a, int32_t* err, cudaStream_t stream) {
  DSV4_CUDA_REQUIRE(wgmma_takes(a), "wgmma gemm: unsupported call (weight kind, groups " + std::to_string(a.groups) +
                                        ", K " + std::to_string(a.kg) + ", or alignment)");
  if (a.rows == 0) return;
  if (a.kind == GemmWeightKind::kFp8) {
    launch<BForm::kFp8>(a, err, stream);
  } else {
    launch<BForm::kFp4>(a, err, stream);
  }
}

int64_t wgmma_widened_bytes(const ExactBlockArgs& a, int experts) {
  return widened_bytes(int64_t{experts} * (has_pair(a) ? 2 : 1), a.n, a.kg);
}

void wgmma_gemm_widened(const ExactBlockArgs& a, int experts_per_pass, void* scratch, int32_t* err,
                        cudaStream_t stream) {
  DSV4_CUDA_REQUIRE(wgmma_takes(a) && a.kind == GemmWeightKind::kFp4 && experts_per_pass >= 1,
                    "wgmma gemm: widening beforehand needs an FP4 call it takes");
  if (a.rows == 0) return;
  const int weights = std::max(a.experts, 1);
  const int per = std::min(experts_per_pass, weights);
  const int halves = has_pair(a) ? 2 : 1;
  const int64_t codes = int64_t{per} * halves * a.n * a.kg;
  for (int e0 = 0; e0 < weights; e0 += per) {
    const int n = std::min(per, weights - e0);
    ExactBlockArgs s = expert_slice(a, e0, n);
    s.wide = static_cast<uint8_t*>(scratch);
    s.wide_scale = reinterpret_cast<float*>(s.wide + codes);
    s.wide_slots = per;
    widen_fp4(s, n, err, stream);
    launch<BForm::kWide>(s, err, stream);
  }
}

}  // namespace dsv4::cuda
