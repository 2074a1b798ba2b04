#include <atomic>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/fp4_gemv.h"
#include "backend/cuda/gemm_tiles.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/ptx.cuh"

namespace dsv4::cuda {
namespace {

using namespace gemm_tiles;

// Why a kernel of its own: the skinny kernel gives each lane an output column, so a one-row tile
// spends ~9 instructions a product (fp64 patterns, shared-memory activations, two barriers a stage)
// and is bound by issue, not by DRAM (docs/perf-history.md). Here a lane owns a 32-element sub-block of K instead:
// a warp's 16-byte weight loads cover 512 contiguous bytes of one column, the lane keeps its
// sub-block's activation digits in registers for all of the warp's columns, and the weights become
// int8 with two prmt lookups, so dp4a sums four products an instruction.
//
// The sums are the skinny kernel's integer block sums (gemm.cu): e4m3·2^9 as three signed base-128
// int8 digits, e2m1·2 from the table {0,1,2,3,4,6,8,12}; the block sum S·2^10 is an exact int32,
// rounded once to fp32, times the activation's and the weight's scales, and the column adds its
// sub-blocks' contributions in ascending K from +0: the same bits.
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarp;
constexpr int kCols = 4;                  // columns per warp (8 took 207 registers: two CTAs an SM, no faster)
constexpr int kCtaCols = kWarps * kCols;  // columns per CTA
constexpr uint32_t kMag0 = 0x03020100u;   // e2m1·2 of codes 0-3
constexpr uint32_t kMag1 = 0x0c080604u;   // codes 4-7
constexpr float kUnscale = 0x1p-10f;

// Dynamic shared memory for a group's K: digit planes, block scales, NaN flags, contributions.
struct Layout {
  int64_t kg;
  __host__ __device__ int64_t nsb() const { return kg / 32; }
  __host__ __device__ int64_t sa_at() const { return 3 * kg; }
  __host__ __device__ int64_t nan_at() const { return sa_at() + kg / 128 * 4; }
  __host__ __device__ int64_t contrib_at() const { return (nan_at() + kg / 128 + 15) / 16 * 16; }
  // A column's contributions sit nsb + 1 floats apart, so the columns' chains read distinct banks.
  __host__ __device__ int64_t stride() const { return nsb() + 1; }
  __host__ __device__ int64_t bytes() const { return contrib_at() + int64_t{kWarps} * kCols * stride() * 4; }
};

// The row's codes of this group as digit planes, its block scales and NaN flags (whole CTA).
__device__ void stage_row(const ExactBlockArgs& p, int64_t row, int64_t g, const Layout& L, uint8_t* smem) {
  auto* dig = reinterpret_cast<int8_t*>(smem);
  auto* sa = reinterpret_cast<float*>(smem + L.sa_at());
  uint8_t* nan = smem + L.nan_at();
  const uint8_t* codes = p.codes + row * p.codes_ld + g * p.kg;
  const int64_t nkb = p.kg / 128;
  for (int64_t kb = threadIdx.x; kb < nkb; kb += blockDim.x) {
    sa[kb] = p.scales[(g * p.kg / 128 + kb) * p.scale_ld + row];
    nan[kb] = 0;
  }
  __syncthreads();
  for (int64_t q = threadIdx.x; q < p.kg / 4; q += blockDim.x) {
    const uint32_t c4 = *reinterpret_cast<const uint32_t*>(codes + q * 4);
    uint32_t d[3] = {0, 0, 0};
    bool bad = false;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const auto c = static_cast<uint8_t>(c4 >> (8 * i));
      const bool is_nan = (c & 0x7fu) == 0x7fu;
      bad |= is_nan;
      add_digits(is_nan ? 0 : __float2int_rn(__fmul_rn(e4m3_to_f(c), 512.0f)), i, d);
    }
#pragma unroll
    for (int pl = 0; pl < 3; ++pl) *reinterpret_cast<uint32_t*>(dig + pl * p.kg + q * 4) = d[pl];
    if (bad) nan[q * 4 / 128] = 1;  // benign race: every writer stores 1
  }
  __syncthreads();
}

// stage_row from digit planes made beforehand for the whole call (p.a_digits, gemm_imma.h
// digit_planes: a magnitude-and-sign split of the same integers e4m3·2^9, hence the same block sums):
// the CTA copies them and only scans the codes for NaN.
__device__ void stage_planes(const ExactBlockArgs& p, int64_t row, int64_t g, const Layout& L, uint8_t* smem) {
  auto* sa = reinterpret_cast<float*>(smem + L.sa_at());
  uint8_t* nan = smem + L.nan_at();
  const int64_t at = row * p.codes_ld + g * p.kg, pieces = p.kg / 16;
  for (int64_t q = threadIdx.x; q < 3 * pieces; q += blockDim.x) {
    const int64_t pl = q / pieces, i = q % pieces;
    cp_async<16>(smem + pl * p.kg + i * 16, p.a_digits + pl * p.a_digit_stride + at + i * 16);
  }
  cp_async_commit();
  const int64_t nkb = p.kg / 128;
  for (int64_t kb = threadIdx.x; kb < nkb; kb += blockDim.x) {
    sa[kb] = p.scales[(g * p.kg / 128 + kb) * p.scale_ld + row];
    nan[kb] = 0;
  }
  __syncthreads();
  for (int64_t q = threadIdx.x; q < pieces; q += blockDim.x) {
    const uint4 c = *reinterpret_cast<const uint4*>(p.codes + at + q * 16);
    if (any_nan4(c.x) || any_nan4(c.y) || any_nan4(c.z) || any_nan4(c.w)) nan[q / 8] = 1;  // benign race
  }
  cp_async_wait_all();
  __syncthreads();
}

// Σ d·w over eight products: w = eight e2m1 codes (element 2j in byte j's low nibble), d = the
// elements' digits of one plane in two words. Positive and negative weights sum apart (a code's bit 3
// is its sign, which prmt turns into a zero from the other table half).
__device__ __forceinline__ void word_products(uint32_t w, const uint32_t (&d)[3][2], int (&pos)[3], int (&neg)[3]) {
  const uint32_t lo = w, hi = w >> 16;
  const uint32_t plo = prmt(kMag0, kMag1, lo), nlo = prmt(kMag0, kMag1, lo ^ 0x8888u);
  const uint32_t phi = prmt(kMag0, kMag1, hi), nhi = prmt(kMag0, kMag1, hi ^ 0x8888u);
#pragma unroll
  for (int pl = 0; pl < 3; ++pl) {
    pos[pl] = __dp4a(static_cast<int>(d[pl][0]), static_cast<int>(plo), pos[pl]);
    pos[pl] = __dp4a(static_cast<int>(d[pl][1]), static_cast<int>(phi), pos[pl]);
    neg[pl] = __dp4a(static_cast<int>(d[pl][0]), static_cast<int>(nlo), neg[pl]);
    neg[pl] = __dp4a(static_cast<int>(d[pl][1]), static_cast<int>(nhi), neg[pl]);
  }
}

// One sub-block's contribution (S·2^-10·sa)·sb, from its 16 weight bytes and the lane's digits.
__device__ __forceinline__ float sub_block(uint4 w, const uint4 (&dg)[3][2], float sa, uint8_t sb, bool nan) {
  int pos[3] = {0, 0, 0}, neg[3] = {0, 0, 0};
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    uint32_t d[3][2];
#pragma unroll
    for (int pl = 0; pl < 3; ++pl) {
      const uint4& v = dg[pl][i / 2];
      d[pl][0] = i % 2 ? v.z : v.x;
      d[pl][1] = i % 2 ? v.w : v.y;
    }
    word_products(words[i], d, pos, neg);
  }
  const int sum = (pos[0] - neg[0]) + (pos[1] - neg[1]) * 128 + (pos[2] - neg[2]) * 16384;
  const float b = nan ? __int_as_float(0x7fffffff) : __fmul_rn(__int2float_rn(sum), kUnscale);
  return __fmul_rn(__fmul_rn(b, sa), ue8m0_f(sb));
}

template <bool kPlanes>
__global__ void __launch_bounds__(kThreads, 4) fp4_gemv_kernel(const ExactBlockArgs p) {
  pdl_enter();
  extern __shared__ uint4 smem4[];
  auto* smem = reinterpret_cast<uint8_t*>(smem4);
  const Layout L{p.kg};
  Tile t;
  if (!row_tile(p, 1, t)) return;
  // The column tiles of every group, then (a pair) those of the second weight.
  const int64_t col_tiles = cdiv(p.ng, kCtaCols), half = p.groups * col_tiles;
  const bool second = blockIdx.y >= half;
  const int64_t tile = blockIdx.y - (second ? half : 0), g = tile / col_tiles;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t nl0 = (tile % col_tiles) * kCtaCols + warp * kCols;  // the warp's first column
  const void* wv0 = p.offsets ? (second ? p.w_list_b : p.w_list)[t.e] : (second ? p.w_b : p.w);
  const auto* w = static_cast<const uint8_t*>(wv0);
  const uint8_t* ws =
      p.offsets ? (second ? p.w_scale_list_b : p.w_scale_list)[t.e] : (second ? p.w_scale_b : p.w_scale);
  const auto* dig = reinterpret_cast<const int8_t*>(smem);
  const auto* sa = reinterpret_cast<const float*>(smem + L.sa_at());
  const uint8_t* nan = smem + L.nan_at();
  const int64_t nsb = L.nsb(), stride = L.stride(), row_bytes = p.kg / 2, scale_row = p.kg / 32;
  float* contrib = reinterpret_cast<float*>(smem + L.contrib_at()) + int64_t{warp} * kCols * stride;
  int cols = 0;  // the warp's valid columns
  while (cols < kCols && nl0 + cols < p.ng) ++cols;
  // Chunk j: sub-block j·32 + lane of each column; the next chunk's loads are in flight while one sums.
  uint4 wv[kCols];
  uint8_t sv[kCols];
  // The warp's first column's weight row and scales; column c lies c rows on (offsets below 2^31).
  const auto* w0 = reinterpret_cast<const uint4*>(w + (g * p.ng + nl0) * row_bytes);
  const uint8_t* s0 = ws + (g * p.ng + nl0) * scale_row;
  const auto load = [&](int64_t b, uint4(&dst)[kCols], uint8_t(&sc)[kCols]) {
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const bool ok = c < cols && b < nsb;
      const int at = static_cast<int>(b);
      dst[c] = ok ? __ldg(w0 + c * static_cast<int>(row_bytes / 16) + at) : uint4{};
      sc[c] = ok ? __ldg(s0 + c * static_cast<int>(scale_row) + at) : 0;
    }
  };
  load(lane, wv, sv);  // in flight while the row is staged
  if constexpr (kPlanes) {
    stage_planes(p, t.r0, g, L, smem);
  } else {
    stage_row(p, t.r0, g, L, smem);
  }
  for (int64_t b = lane; b - lane < nsb; b += kWarp) {
    uint4 wn[kCols];
    uint8_t sn[kCols];
    load(b + kWarp, wn, sn);
    if (b < nsb) {
      uint4 dg[3][2];
#pragma unroll
      for (int pl = 0; pl < 3; ++pl) {
        dg[pl][0] = *reinterpret_cast<const uint4*>(dig + pl * p.kg + b * 32);
        dg[pl][1] = *reinterpret_cast<const uint4*>(dig + pl * p.kg + b * 32 + 16);
      }
      const float s = sa[b / 4];
      const bool bad = nan[b / 4] != 0;
#pragma unroll
      for (int c = 0; c < kCols; ++c)
        if (c < cols) contrib[c * stride + b] = sub_block(wv[c], dg, s, sv[c], bad);
    }
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      wv[c] = wn[c];
      sv[c] = sn[c];
    }
  }
  __syncwarp();
  if (lane >= cols) return;
  const float* mine = contrib + lane * stride;
  float acc = 0.0f;
#pragma unroll 8
  for (int64_t b = 0; b < nsb; ++b) acc = __fadd_rn(acc, mine[b]);
  store_out(second ? p.y_b : p.y, p.y_ld, p.y_f32, t.r0, g * p.ng + nl0 + lane, acc);
}

std::atomic<int64_t> g_launches{0};

}  // namespace

bool fp4_gemv_takes(GemmWeightKind kind, int64_t rows_per_weight, int64_t kg) {
  return kind == GemmWeightKind::kFp4 && rows_per_weight <= 1 && kg <= kFp4GemvMaxK;
}
int64_t fp4_gemv_launches() { return g_launches.load(); }

bool fp4_gemv_applies(const ExactBlockArgs& a) {
  if (a.kind != GemmWeightKind::kFp4 || a.x || !a.codes || a.partial || a.kg > kFp4GemvMaxK) {
    return false;
  }
  if (a.codes_ld % 4 != 0 || reinterpret_cast<uintptr_t>(a.codes) % 4 != 0) return false;
  const auto misaligned = [](const void* w) { return reinterpret_cast<uintptr_t>(w) % 16 != 0; };
  return a.offsets || (!misaligned(a.w) && !misaligned(a.w_b));
}

bool fp4_gemv(const ExactBlockArgs& a, cudaStream_t stream) {
  if (!fp4_gemv_applies(a)) return false;
  const Layout L{a.kg};
  for (const auto kernel : {fp4_gemv_kernel<false>, fp4_gemv_kernel<true>}) {
    allow_dynamic_smem(kernel, Layout{kFp4GemvMaxK}.bytes());
  }
  const int64_t tiles = row_tiles(a.rows, 1, a.offsets ? a.experts : 0);
  const int64_t cols = (a.y_b ? 2 : 1) * a.groups * cdiv(a.ng, kCtaCols);
  DSV4_CUDA_REQUIRE(tiles < (int64_t{1} << 31) && cols <= 65535, "fp4_gemv: grid out of range");
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(cols));
  if (a.a_digits) {
    launch_kernel(fp4_gemv_kernel<true>, grid, kThreads, static_cast<size_t>(L.bytes()), stream, a);
  } else {
    launch_kernel(fp4_gemv_kernel<false>, grid, kThreads, static_cast<size_t>(L.bytes()), stream, a);
  }
  g_launches.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace dsv4::cuda
