#include <atomic>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/fp8_gemv.h"
#include "backend/cuda/gemm_tiles.cuh"
#include "backend/cuda/launch.cuh"

namespace dsv4::cuda {
namespace {

using namespace gemm_tiles;

// Why a kernel of its own: the skinny kernel gives each lane an output column and reads the row's
// activations as shared-memory broadcasts, one 16-byte load per two products; its one-row tiles
// launch ~4 waves of short CTAs that each wait on DRAM about twice (Nsight Compute: latency-bound,
// well under the DRAM bandwidth; docs/perf-history.md, session 15). Here:
//  * the grid is persistent (one CTA an SM, 16 warps); a CTA stages the row's activations once and
//    then streams its contiguous range of column tiles through a ring of 32 KB stages (cp.async,
//    kStages deep, the first ones issued before the PDL wait: weights are never written);
//  * in a stage, warp (cs, ks) owns 4 columns and 512 bytes of K; a lane owns 16 consecutive K of
//    each column, its 16 activations (fp64, one load a stage) serve all 4, and eight lanes make one
//    128-block, whose exact sum three xor shuffles finish.
// The sums are the skinny kernel's (gemm.cu, gemm_tiles.cuh): activations a·2^1000 and weights
// w·2^-1016 in fp64, so every product and the block sum are exact in any order; the sum is rounded
// once to fp32, unscaled, times (sa·sb), and each column adds its blocks' contributions in ascending
// K from +0 (shared memory, one ordered chain a column): the CPU's bits.
// Measured alone it is no faster (issue-bound: about 0.43 warp instructions a weight, half of them not
// the sums; docs/perf-history.md, session 15); a step gains from the stages issued before the wait.
constexpr int kWarps = 16;
constexpr int kThreads = kWarps * kWarp;
constexpr int kCols = 4;                              // columns of a warp in a stage
constexpr int kLaneK = 16;                            // K of a lane in a stage
constexpr int kChunk = kWarp * kLaneK;                // K of a warp in a stage (512)
constexpr int kStageBytes = kWarps * kCols * kChunk;  // 32 KB
constexpr int kStages = 4;

// A launch's shape: tile columns C (a stage is C columns x (64 / C)·512 of K, warp w on column set
// w / ksplit and K slice w % ksplit), and the stages of one tile.
struct Shape {
  int cols = 64;
  int ksplit = 1;
  int64_t kg = 0;
  __host__ __device__ int64_t stage_k() const { return int64_t{ksplit} * kChunk; }
  __host__ __device__ int64_t stages_per_tile() const { return cdiv(kg, stage_k()); }
  __host__ __device__ int64_t nkb() const { return kg / 128; }
  // Dynamic shared memory: the ring, the row's activations (fp64, in pass order), their block
  // scales, and two buffers of block contributions (a tile's chain reads one while the next fills
  // the other), a column's nkb + 1 floats apart so that the chains read distinct banks.
  __host__ __device__ int64_t act_at() const { return int64_t{kStages} * kStageBytes; }
  __host__ __device__ int64_t sa_at() const { return act_at() + cdiv(kg, kChunk) * kChunk * 8; }
  __host__ __device__ int64_t contrib_at() const { return (sa_at() + nkb() * 4 + 15) / 16 * 16; }
  __host__ __device__ int64_t stride() const { return nkb() + 1; }
  __host__ __device__ int64_t contrib_floats() const { return int64_t{cols} * stride(); }
  __host__ __device__ int64_t bytes() const { return contrib_at() + 2 * contrib_floats() * 4; }
};

// Where activation k sits: pass j = k / 512 holds element i of lane l at j·512 + (i/2)·64 + 2l + i%2,
// so a warp's 16-byte loads of the pairs (i, i+1) hit 32 consecutive 16-byte slots (no bank conflicts).
__device__ __forceinline__ int64_t act_pos(int64_t k) {
  const int64_t r = k % kChunk;
  const int64_t l = r / kLaneK, i = r % kLaneK;
  return k - r + (i / 2) * 64 + 2 * l + i % 2;
}

// Group g of the row, quantized from bf16 (kBf16) or decoded from codes, as a·2^1000 in pass order,
// with its block scales (whole CTA; a warp a 128-block at a time, four values a lane).
template <bool kBf16>
__device__ void stage_row(const ExactBlockArgs& p, int64_t g, const Shape& sh, uint8_t* smem) {
  auto* act = reinterpret_cast<double*>(smem + sh.act_at());
  auto* sa = reinterpret_cast<float*>(smem + sh.sa_at());
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  for (int64_t kb = warp; kb < sh.nkb(); kb += kWarps) {
    const int64_t k = g * p.kg + kb * 128 + lane * 4;
    float v[4];
    float s;
    if constexpr (kBf16) {
      bf16x4(p.x + k, v);
      uint32_t packed = 0;
      s = quantize_lane4(v, packed);
      e4m3x4(packed, v);
    } else {
      e4m3x4(__ldg(reinterpret_cast<const uint32_t*>(p.codes + k)), v);
      s = p.scales[(k / 128) * p.scale_ld];
    }
    double d[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) d[i] = __dmul_rn(v[i], kSkActScale);
    const int64_t at = act_pos(kb * 128 + lane * 4);  // elements 4q.. of a lane: two pairs, 64 apart
    *reinterpret_cast<double2*>(act + at) = make_double2(d[0], d[1]);
    *reinterpret_cast<double2*>(act + at + 64) = make_double2(d[2], d[3]);
    if (lane == 0) sa[kb] = s;
  }
}

// The exact sum of 16 products (a lane's part of a 128-block), NaN where a weight code is NaN.
__device__ __forceinline__ double lane_sum(uint4 w, const double (&a)[kLaneK]) {
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
  uint32_t nan = 0;
  double s0 = 0.0, s1 = 0.0;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    double wd[4];
    e4m3x4_scaled(words[q], wd, nan);
    s0 = __fma_rn(a[4 * q], wd[0], s0);
    s1 = __fma_rn(a[4 * q + 1], wd[1], s1);
    s0 = __fma_rn(a[4 * q + 2], wd[2], s0);
    s1 = __fma_rn(a[4 * q + 3], wd[3], s1);
  }
  return nan ? __longlong_as_double(0x7ff8000000000000ll) : __dadd_rn(s0, s1);
}

// A stage of a CTA's range of tiles (groups x column tiles): the tile, its K stage, and the tile's
// group and first column within the group. 32-bit and stepped, never divided per stage: 64-bit
// divisions in the stage loop once cost more instructions than the block sums.
struct Cursor {
  int tile = 0, kst = 0;
  int g = 0, c0 = 0;
};

struct Walk {
  int first = 0, end = 0, col_tiles = 0, cols = 0, spt = 0;
  __device__ void place(Cursor& c) const {
    c.g = c.tile / col_tiles;
    c.c0 = (c.tile - c.g * col_tiles) * cols;
  }
  __device__ void advance(Cursor& c) const {
    if (++c.kst == spt) {
      c.kst = 0;
      ++c.tile;
      place(c);
    }
  }
};

// Issues the stage at `c` into `slot` (every thread its 16-byte pieces; columns past ng and K past kg
// are zero-filled) and commits it (an empty group past the range).
__device__ __forceinline__ void issue_stage(const ExactBlockArgs& p, const Shape& sh, const Walk& wk, const Cursor& c,
                                            uint8_t* slot) {
  if (c.tile < wk.end) {
    const int ng = static_cast<int>(p.ng), kg = static_cast<int>(p.kg), stage_k = static_cast<int>(sh.stage_k());
    const int k0 = c.kst * stage_k, shift = 31 - __clz(stage_k / 16);  // stage_k / 16 is a power of two
    const auto* w = static_cast<const uint8_t*>(p.w);
    const uint8_t* base = w + (int64_t{c.g} * ng + c.c0) * kg + k0;
#pragma unroll
    for (int i = 0; i < kStageBytes / 16 / kThreads; ++i) {
      const int q = static_cast<int>(threadIdx.x) + i * kThreads;
      const int col = q >> shift, k = (q & ((1 << shift) - 1)) * 16;
      const bool ok = c.c0 + col < ng && k0 + k < kg;
      cp_async<16>(slot + q * 16, ok ? base + int64_t{col} * kg + k : w, ok ? 16 : 0);
    }
  }
  cp_async_commit();
}

// The ordered chain of column t of a finished tile (threads t < the tile's valid columns).
__device__ __forceinline__ void finish_column(const ExactBlockArgs& p, const Shape& sh, const float* contrib,
                                              const Cursor& c) {
  const int t = static_cast<int>(threadIdx.x);
  if (t >= sh.cols || c.c0 + t >= p.ng) return;
  const float* mine = contrib + t * static_cast<int>(sh.stride());
  const int nkb = static_cast<int>(sh.nkb());
  float acc = 0.0f;
#pragma unroll 8
  for (int b = 0; b < nkb; ++b) acc = __fadd_rn(acc, mine[b]);
  store_out(p.y, p.y_ld, p.y_f32, 0, int64_t{c.g} * p.ng + c.c0 + t, acc);
}

template <bool kBf16>
__global__ void __launch_bounds__(kThreads, 1) fp8_gemv_kernel(const ExactBlockArgs p, Shape sh) {
  extern __shared__ uint4 smem4[];
  auto* smem = reinterpret_cast<uint8_t*>(smem4);
  Walk wk;
  wk.cols = sh.cols;
  wk.col_tiles = static_cast<int>(cdiv(p.ng, sh.cols));
  wk.spt = static_cast<int>(sh.stages_per_tile());
  const int64_t tiles = p.groups * int64_t{wk.col_tiles};
  wk.first = static_cast<int>(tiles * blockIdx.x / gridDim.x);
  wk.end = static_cast<int>(tiles * (blockIdx.x + 1) / gridDim.x);
  const int stages = (wk.end - wk.first) * wk.spt;
  Cursor cur, iss;  // the stage computed, the stage issued next
  cur.tile = wk.first;
  wk.place(cur);
  iss = cur;
  for (int s = 0; s < kStages - 1; ++s) {  // weights only: before the wait
    issue_stage(p, sh, wk, iss, smem + s * kStageBytes);
    wk.advance(iss);
  }
  pdl_enter();
  if (stages == 0) return;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int cs = warp / sh.ksplit, ks = warp % sh.ksplit;  // column set and K slice of this warp
  const int ng = static_cast<int>(p.ng), kg = static_cast<int>(p.kg), nkb = static_cast<int>(sh.nkb());
  const int stage_k = static_cast<int>(sh.stage_k()), stride = static_cast<int>(sh.stride());
  const auto* act = reinterpret_cast<const double*>(smem + sh.act_at());
  const auto* sa = reinterpret_cast<const float*>(smem + sh.sa_at());
  auto* contrib0 = reinterpret_cast<float*>(smem + sh.contrib_at());
  const int cbuf = static_cast<int>(sh.contrib_floats());
  int staged = -1;  // the group whose activations are in shared memory
  Cursor prev;      // the stage before cur
  for (int s = 0; s < stages; ++s) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // stage s landed for all; everyone is done with stage s - 1 and its slot
    issue_stage(p, sh, wk, iss, smem + (s + kStages - 1) % kStages * kStageBytes);
    wk.advance(iss);
    const int buf = (cur.tile - wk.first) & 1;
    if (cur.kst == 0) {
      if (s > 0) finish_column(p, sh, contrib0 + (buf ^ 1) * cbuf, prev);  // its last stage is behind the barrier
      if (cur.g != staged) {  // the barrier above: every warp is past the old group's activations
        stage_row<kBf16>(p, cur.g, sh, smem);
        __syncthreads();
        staged = cur.g;
      }
    }
    // This warp's part: columns cs·4.. of the tile, K [kst·stage_k + ks·512, +512).
    const int j = cur.kst * sh.ksplit + ks;  // the activation pass
    const int k = j * kChunk + lane * kLaneK, kb = k / 128;
    const bool live = k < kg;  // whole 8-lane groups: K is a multiple of 128
    const int col = cur.c0 + cs * kCols;
    const int cols = max(0, min(kCols, ng - col));
    // Lanes past K load zeros: a stage may reach past the staged passes (K off the stage grid).
    double a[kLaneK];
#pragma unroll
    for (int i = 0; i < kLaneK; i += 2) {
      const double2 v =
          live ? *reinterpret_cast<const double2*>(act + j * kChunk + i / 2 * 64 + 2 * lane) : make_double2(0.0, 0.0);
      a[i] = v.x;
      a[i + 1] = v.y;
    }
    const float sact = live ? sa[kb] : 0.0f;
    const uint8_t* slot = smem + s % kStages * kStageBytes + ks * kChunk + lane * 16;
    float* contrib = contrib0 + buf * cbuf;
    const int64_t n0 = int64_t{cur.g} * ng + col;  // the weight row of the warp's first column
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      if (c >= cols) break;  // warp-uniform
      const uint4 w = *reinterpret_cast<const uint4*>(slot + (cs * kCols + c) * stage_k);
      double v = lane_sum(w, a);
#pragma unroll
      for (int o = 1; o < 8; o <<= 1) v = __dadd_rn(v, __shfl_xor_sync(kFull, v, o));
      if (live && lane % 8 == 0) {  // the group's first lane writes
        const float sb = ue8m0_f(__ldg(p.w_scale + (n0 + c) / 128 * nkb + kb));
        const float b = isnan(v) ? __int_as_float(0x7fffffff) : __fmul_rn(__double2float_rn(v), kSkFp8Unscale);
        contrib[(cs * kCols + c) * stride + kb] = __fmul_rn(b, __fmul_rn(sact, sb));
      }
    }
    prev = cur;
    wk.advance(cur);
  }
  cp_async_wait<0>();
  __syncthreads();
  finish_column(p, sh, contrib0 + ((prev.tile - wk.first) & 1) * cbuf, prev);
}

std::atomic<int64_t> g_launches{0};

// The widest tile (least re-reading of activations, fewest chains) that still gives every SM a
// tile, without K slices past the group's K.
Shape pick_shape(const ExactBlockArgs& a) {
  Shape sh;
  sh.kg = a.kg;
  const int64_t passes = cdiv(a.kg, kChunk);
  for (int ks = 1;; ks *= 2) {
    sh.ksplit = ks;
    sh.cols = kWarps * kCols / ks;
    if (a.groups * cdiv(a.ng, sh.cols) >= sm_count() || ks * 2 > kWarps || ks * 2 > passes) return sh;
  }
}

}  // namespace

int64_t fp8_gemv_launches() { return g_launches.load(); }

bool fp8_gemv_applies(const ExactBlockArgs& a) {
  if (a.kind != GemmWeightKind::kFp8 || a.offsets || a.y_b || a.rows != 1) return false;
  if (a.kg > kFp8GemvMaxK || a.kg % 128 != 0 || reinterpret_cast<uintptr_t>(a.w) % 16 != 0) return false;
  if (a.x ? reinterpret_cast<uintptr_t>(a.x) % 8 != 0 : !a.codes || reinterpret_cast<uintptr_t>(a.codes) % 4 != 0) {
    return false;
  }
  return pick_shape(a).bytes() <= smem_optin();
}

bool fp8_gemv(const ExactBlockArgs& a, cudaStream_t stream) {
  if (!fp8_gemv_applies(a)) return false;
  for (const auto kernel : {fp8_gemv_kernel<false>, fp8_gemv_kernel<true>}) {
    allow_dynamic_smem(kernel, static_cast<size_t>(smem_optin()));
  }
  const Shape sh = pick_shape(a);
  const int64_t tiles = a.groups * cdiv(a.ng, sh.cols);
  const auto grid = static_cast<unsigned>(imin(tiles, sm_count()));
  const auto smem = static_cast<size_t>(sh.bytes());
  if (a.x) {
    launch_kernel(fp8_gemv_kernel<true>, grid, kThreads, smem, stream, a, sh);
  } else {
    launch_kernel(fp8_gemv_kernel<false>, grid, kThreads, smem, stream, a, sh);
  }
  g_launches.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace dsv4::cuda
