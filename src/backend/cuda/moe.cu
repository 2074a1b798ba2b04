// MoE gate and experts (see moe.h). Arithmetic as in backend/cpu/moe.cpp: every fp32 operation is
// spelled with a round-to-nearest intrinsic so that nvcc cannot contract it into an FMA.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>
#include <optional>
#include <unordered_map>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/fp4_gemv.h"
#include "backend/cuda/gemm_imma.h"
#include "backend/cuda/gemm_imma_skinny.h"
#include "backend/cuda/gemm_tiles.cuh"
#include "backend/cuda/glibc_expf.cuh"
#include "backend/cuda/glibc_log1pf.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/moe.h"
#include "backend/cuda/scratch_epoch.h"
#include "backend/cuda/weight_view.h"
#include "backend/fast_expf.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kGateThreads = 256;
constexpr unsigned kFull = 0xffffffffu;
static_assert(kMoeMaxExperts <= 32 * kWarp, "top_k marks taken experts in one 32-bit mask per lane");

// exp and log1p as the CPU's glibc expf and log1pf bit for bit (glibc_expf.cuh, glibc_log1pf.cuh),
// where CUDA's fp32 versions are off by up to 2 ulps (and fp64 log1p rounded to fp32 by one ulp in
// ~0.4% of arguments).
__device__ __forceinline__ float exp_f(float x) { return host_expf(x); }
__device__ __forceinline__ float log1p_f(float x) { return host_log1pf(x); }

// ---- gate -------------------------------------------------------------------------------------

// The gate as its kernel gets it: the scores' GEMM output z added.
struct GateLaunch : MoeGateParams {
  const float* z = nullptr;  // [tokens, experts]
  int32_t* err = nullptr;
};

// Block max of v (threads of one block; fmaxf is order-independent). red: shared [warps].
__device__ float block_max(float v, float* red) {
  v = warp_max(v);
  if (threadIdx.x % kWarp == 0) red[threadIdx.x / kWarp] = v;
  __syncthreads();
  float m = red[0];
  for (int i = 1; i < static_cast<int>(blockDim.x / kWarp); ++i) m = fmaxf(m, red[i]);
  __syncthreads();
  return m;
}

// s = score(z) for one token (one block); softmax sums in ascending expert order, as the CPU does.
__device__ void scores(ScoreFunc f, const float* z, int n, float* s, float* red) {
  const int tid = threadIdx.x, step = blockDim.x;
  if (f == ScoreFunc::kSoftmax) {
    float mx = -INFINITY;
    for (int e = tid; e < n; e += step) mx = fmaxf(mx, z[e]);
    mx = block_max(mx, red);
    for (int e = tid; e < n; e += step) s[e] = exp_f(__fsub_rn(z[e], mx));
    __syncthreads();
    if (tid == 0) {
      float sum = 0.0f;
      for (int e = 0; e < n; ++e) sum = __fadd_rn(sum, s[e]);
      red[0] = sum;
    }
    __syncthreads();
    const float sum = red[0];
    for (int e = tid; e < n; e += step) s[e] = __fdiv_rn(s[e], sum);
  } else if (f == ScoreFunc::kSigmoid) {
    for (int e = tid; e < n; e += step) s[e] = __fdiv_rn(1.0f, __fadd_rn(1.0f, exp_f(-z[e])));
  } else {
    for (int e = tid; e < n; e += step) s[e] = __fsqrt_rn(z[e] > 20.0f ? z[e] : log1p_f(exp_f(z[e])));
  }
  __syncthreads();
}

// (v, i) ranks before (bv, bi): higher value, ties to the lower index; i < 0 = no candidate.
__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
  if (i < 0) return false;
  if (bi < 0) return true;
  return v > bv || (v == bv && i < bi);
}

// The k best of sel (one warp), in rank order: k rounds of a warp argmax over the experts not yet
// taken. Lane l owns experts l + 32·j and marks taken ones in bit j of its mask. Lane 0's result is
// broadcast, so that all lanes agree even on NaN scores (which have no order).
__device__ void top_k(const float* sel, int n, int k, int32_t* out) {
  const int lane = threadIdx.x;
  uint32_t taken = 0;
  for (int r = 0; r < k; ++r) {
    float bv = 0.0f;
    int bi = -1;
    for (int j = 0, e = lane; e < n; ++j, e += kWarp) {
      if (!((taken >> j) & 1u) && better(sel[e], e, bv, bi)) {
        bv = sel[e];
        bi = e;
      }
    }
    for (int o = kWarp / 2; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(kFull, bv, o);
      const int oi = __shfl_xor_sync(kFull, bi, o);
      if (better(ov, oi, bv, bi)) {
        bv = ov;
        bi = oi;
      }
    }
    bi = __shfl_sync(kFull, bi, 0);  // >= 0: k <= n leaves a candidate every round
    if (bi % kWarp == lane) taken |= 1u << (bi / kWarp);
    if (lane == 0) out[r] = bi;
  }
}

// Hash routing (lane 0): out[r] = tid2eid[token · k + r], −1 where the id or the entry is invalid.
__device__ void hash_route(const GateLaunch& a, int64_t t, int32_t* out) {
  const int32_t tok = a.token_ids[t];
  const bool tok_ok = tok >= 0 && tok < a.vocab;
  if (!tok_ok) report(a.err, DeviceError::kMoeToken);
  for (int r = 0; r < a.topk; ++r) {
    int32_t e = -1;
    if (tok_ok) {
      e = a.tid2eid[int64_t{tok} * a.topk + r];
      if (e < 0 || e >= a.experts) {
        report(a.err, DeviceError::kMoeExpert);
        e = -1;
      }
    }
    out[r] = e;
  }
}

// w_r = s[idx_r] / Σ_r s[idx_r] (sum in output order; not for softmax) · route_scale; invalid slots
// get expert 0 with weight 0. w: scratch [topk].
__device__ void write_route(const GateLaunch& a, int64_t t, const float* s, const int32_t* idx, float* w) {
  float sum = 0.0f;
  for (int r = 0; r < a.topk; ++r) {
    w[r] = idx[r] >= 0 ? s[idx[r]] : 0.0f;
    sum = __fadd_rn(sum, w[r]);
  }
  for (int r = 0; r < a.topk; ++r) {
    float v = w[r];
    if (a.score_func != ScoreFunc::kSoftmax) v = __fdiv_rn(v, sum);
    v = __fmul_rn(v, a.route_scale);
    a.indices[t * a.topk + r] = idx[r] >= 0 ? idx[r] : 0;
    a.weights[t * a.topk + r] = idx[r] >= 0 ? v : 0.0f;
  }
}

// One block per token: all threads score, warp 0 selects, its lane 0 writes. Dynamic shared
// memory: scores [experts], selection values [experts].
__global__ void __launch_bounds__(kGateThreads) gate_kernel(GateLaunch a) {
  pdl_enter();
  extern __shared__ float smem[];
  __shared__ int32_t idx[kMoeMaxTopk];
  __shared__ float w[kMoeMaxTopk];
  __shared__ float red[kGateThreads / kWarp];
  const int64_t t = blockIdx.x;
  float* s = smem;
  scores(a.score_func, a.z + t * a.experts, a.experts, s, red);
  const float* sel = s;
  if (!a.tid2eid && a.bias) {
    float* biased = smem + a.experts;
    for (int e = threadIdx.x; e < a.experts; e += blockDim.x) biased[e] = __fadd_rn(s[e], a.bias[e]);
    __syncthreads();
    sel = biased;
  }
  if (threadIdx.x >= kWarp) return;
  if (!a.tid2eid) {
    top_k(sel, a.experts, a.topk, idx);
  } else if (threadIdx.x == 0) {
    hash_route(a, t, idx);
  }
  if (threadIdx.x == 0) write_route(a, t, s, idx, w);  // idx was written by this thread
}

// ---- routing ----------------------------------------------------------------------------------

// Sort keys of the (token, slot) pairs i = t·topk + r: the expert, or `experts` (sorted last, routed
// nowhere) for an invalid id.
__global__ void route_keys_kernel(const int32_t* indices, int n, int experts, uint32_t* keys, int32_t* pairs,
                                  int32_t* err) {
  pdl_enter();
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int32_t e = indices[i];
    const bool ok = e >= 0 && e < experts;
    if (!ok) report(err, DeviceError::kMoeExpert);
    keys[i] = static_cast<uint32_t>(ok ? e : experts);
    pairs[i] = static_cast<int32_t>(i);
  }
}

// From the sorted keys: offsets[e] = first sorted row of expert e (offsets[experts] = routed rows),
// and pos[pair] = its sorted row (−1: not routed). Boundary j writes the experts in (key[j−1], key[j]].
__global__ void route_offsets_kernel(const uint32_t* keys, const int32_t* pairs, int n, int experts, int32_t* offsets,
                                     int32_t* pos) {
  pdl_enter();
  for (int64_t j = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; j <= n; j += int64_t{gridDim.x} * blockDim.x) {
    const int prev = j == 0 ? -1 : static_cast<int>(keys[j - 1]);
    const int cur = j == n ? experts : static_cast<int>(keys[j]);
    for (int e = prev + 1; e <= cur; ++e) offsets[e] = static_cast<int32_t>(j);
    if (j < n) pos[pairs[j]] = cur < experts ? static_cast<int32_t>(j) : -1;
  }
}

// The padded layout (GemmRunner::lt_experts_planned): expert e's rows start at padded[e], a multiple of
// 4, and take round4(count) rows, so that a cuBLASLt matmul an expert covers them in one piece. From the
// sorted layout (offsets, pairs_sorted): padded offsets (written by CTA 0), row_pairs[q] = the pair of
// padded row q (−1: padding) for q < capacity, and pos[pair] = its padded row. Each CTA scans the
// (at most kMoeMaxExperts) counts itself; a row finds its expert by binary search.
__global__ void route_pad_kernel(const int32_t* offsets, const int32_t* pairs_sorted, int experts, int64_t capacity,
                                 int32_t* padded, int32_t* row_pairs, int32_t* pos) {
  pdl_enter();
  __shared__ int32_t start[kMoeMaxExperts + 1];
  for (int e = static_cast<int>(threadIdx.x); e < experts; e += blockDim.x) start[e + 1] = offsets[e + 1] - offsets[e];
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t at = 0;
    for (int e = 0; e < experts; ++e) {
      const int32_t count = start[e + 1];
      start[e] = at;
      at += (count + 3) / 4 * 4;
    }
    start[experts] = at;
  }
  __syncthreads();
  if (blockIdx.x == 0)
    for (int e = static_cast<int>(threadIdx.x); e <= experts; e += blockDim.x) padded[e] = start[e];
  for (int64_t q = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; q < capacity; q += int64_t{gridDim.x} * blockDim.x) {
    int32_t pair = -1;
    if (q < start[experts]) {
      const int lo = gemm_tiles::expert_of_row(start, experts, q);
      const int64_t local = q - start[lo];
      if (local < offsets[lo + 1] - offsets[lo]) {
        pair = pairs_sorted[offsets[lo] + local];
        pos[pair] = static_cast<int32_t>(q);
      }
    }
    row_pairs[q] = pair;
  }
}

// Rows the padded layout may add: up to 3 an expert.
inline int64_t padded_rows(int64_t n, int experts) { return n + 3 * int64_t{experts}; }

// Pairs one CTA routes (a decode step's tokens x topk): route_keys, the radix sort and route_offsets
// in one launch instead of four or more.
constexpr int kRouteSmall = 1024;

// The same pairs_sorted, offsets and pos for n <= kRouteSmall: a stable counting sort by key (expert,
// `experts` for an invalid id), which leaves pairs in ascending order within a key as the stable radix
// sort does. By the whole CTA, one thread per pair (blockDim.x >= max(n, 32)): sorted[row] = pair,
// start[key] = the key's first row (keys 0..experts), pos[pair] = its row (-1: invalid) where given.
__device__ void sort_pairs(const int32_t* indices, int n, int experts, int32_t* key, int32_t* start, int32_t* sorted,
                           int32_t* pos, int32_t* err) {
  const int i = static_cast<int>(threadIdx.x), bins = experts + 1;
  for (int b = i; b < bins; b += blockDim.x) start[b] = 0;
  int k = experts;
  if (i < n) {
    const int32_t e = indices[i];
    const bool ok = e >= 0 && e < experts;
    if (!ok) report(err, DeviceError::kMoeExpert);
    k = ok ? e : experts;
    key[i] = k;
  }
  __syncthreads();
  if (i < n) atomicAdd(&start[k], 1);
  __syncthreads();
  if (i < kWarp) {  // counts -> exclusive prefix sums: lane l scans its run of bins, a warp scan joins them
    const int per = (bins + kWarp - 1) / kWarp, b0 = min(bins, i * per), b1 = min(bins, b0 + per);
    int run = 0;
    for (int b = b0; b < b1; ++b) run += start[b];
    int inc = run;
    for (int o = 1; o < kWarp; o <<= 1) {
      const int v = __shfl_up_sync(kFull, inc, o);
      if (i >= o) inc += v;
    }
    run = inc - run;
    for (int b = b0; b < b1; ++b) {
      const int c = start[b];
      start[b] = run;
      run += c;
    }
  }
  __syncthreads();
  if (i < n) {
    int rank = 0;  // earlier pairs with the same key
    for (int j = 0; j < i; ++j) rank += key[j] == k;
    const int at = start[k] + rank;
    sorted[at] = i;
    if (pos) pos[i] = k < experts ? at : -1;
  }
  __syncthreads();
}

__global__ void __launch_bounds__(kRouteSmall)
    route_small_kernel(const int32_t* indices, int n, int experts, int32_t* pairs_sorted, int32_t* offsets,
                       int32_t* pos, int32_t* err) {
  pdl_enter();
  __shared__ int32_t key[kRouteSmall];
  __shared__ int32_t start[kMoeMaxExperts + 1];
  sort_pairs(indices, n, experts, key, start, pairs_sorted, pos, err);
  for (int b = static_cast<int>(threadIdx.x); b <= experts; b += blockDim.x) offsets[b] = start[b];
}

// ---- experts ----------------------------------------------------------------------------------

// 128-blocks a warp of the MoE's quantizations: a lane's loads for all of them go out before the first
// block's reductions, four loads in flight a lane instead of one (each warp is short-lived: one load in
// flight kept these kernels at ~35% of copy bandwidth).
constexpr int kQuantBlocks = 4;

// 128-block groups a row of dim columns; warps of a quantization of `rows` such rows.
__host__ __device__ inline int64_t quant_groups(int64_t dim) { return (dim / 128 + kQuantBlocks - 1) / kQuantBlocks; }
int64_t quant_warps(int64_t rows, int64_t dim) { return rows * quant_groups(dim); }

// Blocks kQuantBlocks·(w % groups) on of row j = w / groups of the sorted rows' activation codes (warp w of
// quant_warps): x[token of pair j] quantized per 128-block (quantize_act's arithmetic, without the
// gathered bf16 copy); rows past the routed ones and padding rows (pair −1) are quantized zeros. Codes [rows][dim],
// scales [dim/128][rows].
__device__ __forceinline__ void gather_quantize_blocks(const uint16_t* x, int64_t rows, int64_t dim, int64_t warp,
                                                       const int32_t* pairs, int topk, int32_t routed, uint8_t* codes,
                                                       float* scales) {
  const int64_t nblk = dim / 128, groups = quant_groups(dim), j = warp / groups, kb0 = warp % groups * kQuantBlocks;
  const int lane = threadIdx.x % kWarp;
  const int32_t pair = j < routed ? pairs[j] : -1;
  const uint16_t* src = pair >= 0 ? x + int64_t{pair / topk} * dim + lane * 4 : nullptr;
  float v[kQuantBlocks][4] = {};
#pragma unroll
  for (int b = 0; b < kQuantBlocks; ++b) {
    if (src && kb0 + b < nblk) bf16x4_at(src + (kb0 + b) * 128, v[b]);
  }
#pragma unroll
  for (int b = 0; b < kQuantBlocks; ++b) {
    const int64_t kb = kb0 + b;
    if (kb >= nblk) break;  // uniform over the warp
    uint32_t packed = 0;
    const float sc = quantize_lane4(v[b], packed);
    *reinterpret_cast<uint32_t*>(codes + j * dim + kb * 128 + lane * 4) = packed;
    if (lane == 0) scales[kb * rows + j] = sc;
  }
}

// gather_quantize_blocks over the sorted pairs route_* made.
__global__ void gather_quantize_kernel(const uint16_t* x, int64_t rows, int64_t dim, const int32_t* pairs, int topk,
                                       const int32_t* routed, uint8_t* codes, float* scales) {
  pdl_enter();
  const int64_t warp = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / kWarp;
  if (warp >= rows * quant_groups(dim)) return;
  gather_quantize_blocks(x, rows, dim, warp, pairs, topk, *routed, codes, scales);
}

// Pairs the gather routes itself (a decode step's: one thread a pair).
constexpr int kRouteFused = kThreads;

// The route and the gather in one launch for n <= kRouteFused pairs: every CTA sorts the pairs into
// shared memory (route_small_kernel's sort), the first also writes pairs_sorted, offsets and pos for
// the kernels after it; then its warps gather and quantize their rows as gather_quantize_kernel (a
// quarter of the CTAs, each re-sorting the pairs, that a warp a block would take).
__global__ void __launch_bounds__(kThreads)
    route_gather_quantize_kernel(const int32_t* indices, int n, int experts, const uint16_t* x, int64_t dim, int topk,
                                 int32_t* pairs_sorted, int32_t* offsets, int32_t* pos, uint8_t* codes, float* scales,
                                 int32_t* err) {
  pdl_enter();
  __shared__ int32_t key[kRouteFused], sorted[kRouteFused];
  __shared__ int32_t start[kMoeMaxExperts + 1];
  const bool first = blockIdx.x == 0;
  sort_pairs(indices, n, experts, key, start, sorted, first ? pos : nullptr, first ? err : nullptr);
  if (first) {
    for (int i = static_cast<int>(threadIdx.x); i < n; i += blockDim.x) pairs_sorted[i] = sorted[i];
    for (int b = static_cast<int>(threadIdx.x); b <= experts; b += blockDim.x) offsets[b] = start[b];
  }
  const int64_t warp = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / kWarp;
  if (warp >= int64_t{n} * quant_groups(dim)) return;
  gather_quantize_blocks(x, n, dim, warp, sorted, topk, start[experts], codes, scales);
}

// Eight bf16 values <-> fp32 (one 16-byte vector).
struct Bf16x8 {
  uint4 v;
  // i must be a compile-time constant after unrolling (else v goes to local memory).
  __device__ __forceinline__ uint16_t bits(int i) const {
    const uint32_t w = (&v.x)[i / 2];
    return static_cast<uint16_t>((i & 1) ? w >> 16 : w & 0xffffu);
  }
  __device__ __forceinline__ float get(int i) const { return bf16_to_f(bits(i)); }
  __device__ __forceinline__ void set(int i, uint16_t b) {
    uint32_t& w = (&v.x)[i / 2];
    w = (i & 1) ? (w & 0xffffu) | (uint32_t{b} << 16) : (w & 0xffff0000u) | b;
  }
};

// a = bf16(w · (g' / (1 + exp(−g')) · u')), g' = min(g, L), u' = clamp(u, ±L) when L > 0; the CPU's
// operation order (std::min/std::clamp spelled out, so NaNs propagate alike). Fast: the sigmoid's exp in
// fp32 alone (fast_expf, within 1 ulp; NUMERICS.md's fast tier), where glibc's double-precision expf made
// the routed SwiGLU compute-bound.
template <bool Fast>
__device__ __forceinline__ uint16_t swiglu_one(float gv, float uv, float limit, float w, bool weighted) {
  if (limit > 0.0f) {
    uv = uv < -limit ? -limit : (limit < uv ? limit : uv);
    gv = limit < gv ? limit : gv;
  }
  const float e = Fast ? fast_expf(-gv) : exp_f(-gv);
  float v = __fmul_rn(__fdiv_rn(gv, __fadd_rn(1.0f, e)), uv);
  if (weighted) v = __fmul_rn(w, v);
  return f_to_bf16(v);
}

// One block per row (grid-stride), eight elements per thread step: g, u and out 16-byte aligned and
// dim % 8 == 0 (every buffer of this file). Reads precede writes per vector, so out may equal g or u.
template <bool Fast>
__global__ void swiglu_kernel(SwigluParams p) {
  pdl_enter();
  const int64_t units = p.dim / 8;
  const auto* g = reinterpret_cast<const uint4*>(p.g);
  const auto* u = reinterpret_cast<const uint4*>(p.u);
  for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    uint4* out = reinterpret_cast<uint4*>(p.out) + r * units;
    const float w = p.weights ? p.weights[r] : 1.0f;
    for (int64_t c = threadIdx.x; c < units; c += blockDim.x) {
      const Bf16x8 gv{g[r * units + c]}, uv{u[r * units + c]};
      Bf16x8 a{};
#pragma unroll
      for (int j = 0; j < 8; ++j) a.set(j, swiglu_one<Fast>(gv.get(j), uv.get(j), p.limit, w, p.weights != nullptr));
      out[c] = a.v;
    }
  }
}

// Any other layout: element by element (grid-stride).
template <bool Fast>
__global__ void swiglu_elementwise_kernel(SwigluParams p) {
  pdl_enter();
  const int64_t n = p.rows * p.dim, step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += step) {
    const float w = p.weights ? p.weights[i / p.dim] : 1.0f;
    p.out[i] = swiglu_one<Fast>(bf16_to_f(p.g[i]), bf16_to_f(p.u[i]), p.limit, w, p.weights != nullptr);
  }
}

// swiglu_kernel's routed rows and quantize_act over them in one pass: each (row, 128-block) warp rounds
// its SwiGLU outputs to bf16 and quantizes them, so the bf16 hidden row is never stored. g and u: rows
// of stride ld; codes [rows][inter], scales [inter/128][rows]; padding rows (pair −1) quantize zeros.
template <bool Fast>
__global__ void swiglu_quantize_kernel(const uint16_t* g, const uint16_t* u, int64_t ld, int64_t rows, int64_t inter,
                                       float limit, const float* weights, const int32_t* pairs, const int32_t* routed,
                                       uint8_t* codes, float* scales) {
  const int64_t nblk = inter / 128, groups = quant_groups(inter);
  const int64_t warp = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (warp >= rows * groups) return;
  const int64_t r = warp / groups, kb0 = warp % groups * kQuantBlocks, row = r * inter + lane * 4;
  const int64_t in = r * ld + lane * 4;
  // The layout and the gate's weights were written two or more launches back (the route or gather before
  // the pair's GEMM): read before the wait on the pair's outputs.
  const int32_t pair = r < *routed ? pairs[r] : -1;
  const bool live = pair >= 0;
  const float w = live ? weights[pair] : 0.0f;
  pdl_enter();
  float gv[kQuantBlocks][4] = {}, uv[kQuantBlocks][4] = {};
#pragma unroll
  for (int b = 0; b < kQuantBlocks; ++b) {
    if (live && kb0 + b < nblk) {
      bf16x4_at(g + in + (kb0 + b) * 128, gv[b]);
      bf16x4_at(u + in + (kb0 + b) * 128, uv[b]);
    }
  }
#pragma unroll
  for (int b = 0; b < kQuantBlocks; ++b) {
    const int64_t kb = kb0 + b;
    if (kb >= nblk) break;  // uniform over the warp
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (live) {
#pragma unroll
      for (int i = 0; i < 4; ++i) v[i] = bf16_to_f(swiglu_one<Fast>(gv[b][i], uv[b][i], limit, w, true));
    }
    uint32_t packed = 0;
    const float sc = quantize_lane4(v, packed);
    *reinterpret_cast<uint32_t*>(codes + row + kb * 128) = packed;
    if (lane == 0) scales[kb * rows + r] = sc;
  }
}

unsigned warp_blocks(int64_t warps) { return static_cast<unsigned>((warps * kWarp + kThreads - 1) / kThreads); }

// Rows of one token's routed slots in ascending order (= ascending expert), into shared `rows`.
__device__ int sorted_rows(const int32_t* pos, int topk, int32_t* rows) {
  __shared__ int count;
  if (threadIdx.x == 0) {
    int n = 0;
    for (int r = 0; r < topk; ++r) {  // insertion sort of the valid rows
      const int32_t p = pos[r];
      if (p < 0) continue;
      int i = n++;
      for (; i > 0 && rows[i - 1] > p; --i) rows[i] = rows[i - 1];
      rows[i] = p;
    }
    count = n;
  }
  __syncthreads();
  return count;
}

// y[t] = bf16((Σ fp32(ye[row]) over the token's routed rows in ascending expert order, from 0) +
// fp32(ys[t])). One block per token, 8 columns per thread; the rows' loads are issued in batches of
// kBatch so that they overlap. y_vec: y is 16-byte aligned.
__global__ void combine_kernel(const uint4* ye, const uint4* ys, const int32_t* pos, int topk, int64_t dim, uint16_t* y,
                               bool y_vec) {
  pdl_enter();
  constexpr int kBatch = 8;
  __shared__ int32_t rows[kMoeMaxTopk];
  const int64_t t = blockIdx.x, units = dim / 8;
  const int count = sorted_rows(pos + t * topk, topk, rows);
  for (int64_t c = threadIdx.x; c < units; c += blockDim.x) {
    float acc[8] = {};
    for (int i0 = 0; i0 < count; i0 += kBatch) {
      Bf16x8 v[kBatch];
#pragma unroll
      for (int i = 0; i < kBatch; ++i)
        if (i0 + i < count) v[i].v = ye[int64_t{rows[i0 + i]} * units + c];
#pragma unroll
      for (int i = 0; i < kBatch; ++i)
        if (i0 + i < count)
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[j] = __fadd_rn(acc[j], v[i].get(j));
    }
    const Bf16x8 s{ys[t * units + c]};
    Bf16x8 out{};
#pragma unroll
    for (int j = 0; j < 8; ++j) out.set(j, f_to_bf16(__fadd_rn(acc[j], s.get(j))));
    uint16_t* dst = y + t * dim + c * 8;
    if (y_vec) {
      *reinterpret_cast<uint4*>(dst) = out.v;
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) dst[j] = out.bits(j);
    }
  }
}

// The moe_combine op over pair rows: each token's pairs in ascending expert order (ranked by thread 0),
// then the columns, one per thread (grid-stride over tokens).
__global__ void combine_pairs_kernel(MoeCombineParams p) {
  pdl_enter();
  __shared__ int32_t order[kMoeMaxTopk];
  for (int64_t t = blockIdx.x; t < p.tokens; t += gridDim.x) {
    const int32_t* idx = p.indices + t * p.topk;
    if (threadIdx.x == 0) {
      for (int k = 0; k < p.topk; ++k) {
        int rank = 0;
        for (int j = 0; j < p.topk; ++j) rank += idx[j] < idx[k];
        order[rank] = k;
      }
    }
    __syncthreads();
    for (int64_t c = threadIdx.x; c < p.dim; c += blockDim.x) {
      float acc = 0.0f;
      for (int i = 0; i < p.topk; ++i) acc = __fadd_rn(acc, load_bf16(p.pairs + (t * p.topk + order[i]) * p.dim + c));
      p.y[t * p.dim + c] = f_to_bf16(__fadd_rn(acc, load_bf16(p.shared_y + t * p.dim + c)));
    }
    __syncthreads();
  }
}

// ---- host side --------------------------------------------------------------------------------

// Grid of a grid-stride kernel over n items.
unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 1 << 20));
}

// Grow-only device buffer with stream-ordered allocation: a replaced block is freed after the work
// already enqueued on the stream has run.
struct Buffer {
  void* p = nullptr;
  size_t bytes = 0;

  template <typename T>
  T* get(size_t n, cudaStream_t s) {
    const size_t need = std::max<size_t>(n, 1) * sizeof(T);
    if (need > bytes) {
      scratch_moves(s, "the MoE scratch");
      const size_t grown = std::max(need, bytes + bytes / 2);
      if (p) DSV4_CUDA_CHECK(cudaFreeAsync(p, s));
      p = nullptr;
      bytes = 0;
      DSV4_CUDA_CHECK(cudaMallocAsync(&p, grown, s));
      bytes = grown;
    }
    return static_cast<T*>(p);
  }
  void release(cudaStream_t s) noexcept {
    if (p) cudaFreeAsync(p, s);
    p = nullptr;
    bytes = 0;
  }
};

// Device copies of the per-expert data and scale pointers of one host Weight array.
struct PointerTable {
  std::vector<const void*> data;
  std::vector<const uint8_t*> scale;
  Buffer device;  // [experts] data pointers, then [experts] scale pointers
  // FP4: whether every expert's blocks re-encode exactly for the cuBLASLt route (GemmRunner::
  // fp4_experts_reencode_exactly), asked at the first call that plans it; weights do not change while
  // their pointers stay, and a rebuilt table asks again.
  std::optional<bool> reencodes;

  const void* const* d_data() const { return static_cast<const void* const*>(device.p); }
  const uint8_t* const* d_scale() const {
    return reinterpret_cast<const uint8_t* const*>(static_cast<const void* const*>(device.p) + data.size());
  }
};

enum Buf : int {
  kZ,
  kKeys,
  kKeysSorted,
  kPairs,
  kPairsSorted,
  kPos,
  kOffsets,
  kPadOffsets,
  kRowPairs,
  kSortTemp,
  kRows,
  kCodes,
  kScales,
  kG,
  kU,
  kSharedY,
  kDigits,
  kBufCount
};

void check_routed(const Weight* w, int experts, int64_t rows, int64_t cols, const char* name) {
  DSV4_CUDA_REQUIRE(w != nullptr, std::string("moe experts: missing ") + name);
  for (int e = 0; e < experts; ++e) {
    DSV4_CUDA_REQUIRE(w[e].type == WeightType::kFp4Block || w[e].type == WeightType::kFp8Block,
                      std::string("moe experts: routed ") + name + " must be FP4 or FP8");
    DSV4_CUDA_REQUIRE(w[e].type == w[0].type, std::string("moe experts: routed ") + name + " kinds differ");
    DSV4_CUDA_REQUIRE(w[e].rows == rows && w[e].cols == cols, std::string("moe experts: routed ") + name + " shape");
    DSV4_CUDA_REQUIRE(w[e].data && w[e].scale, std::string("moe experts: routed ") + name + " without data");
  }
}

void check_args(const MoeExpertsParams& a) {
  DSV4_CUDA_REQUIRE(a.tokens >= 0 && a.dim > 0 && a.inter_dim > 0, "moe experts: bad sizes");
  DSV4_CUDA_REQUIRE(a.dim % 128 == 0 && a.inter_dim % 128 == 0, "moe experts: dims must be multiples of 128");
  DSV4_CUDA_REQUIRE(a.experts > 0 && a.experts <= kMoeMaxExperts, "moe experts: experts outside [1, 1024]");
  DSV4_CUDA_REQUIRE(a.topk > 0 && a.topk <= std::min(a.experts, kMoeMaxTopk), "moe experts: bad topk");
  DSV4_CUDA_REQUIRE(a.tokens * a.topk <= INT32_MAX, "moe experts: too many (token, expert) pairs");
  check_routed(a.w1, a.experts, a.inter_dim, a.dim, "w1");
  check_routed(a.w3, a.experts, a.inter_dim, a.dim, "w3");
  check_routed(a.w2, a.experts, a.dim, a.inter_dim, "w2");
  DSV4_CUDA_REQUIRE(a.w1[0].type == a.w2[0].type && a.w3[0].type == a.w2[0].type,
                    "moe experts: w1, w3, w2 must share one kind");
  DSV4_CUDA_REQUIRE(a.shared_w1.rows == a.inter_dim && a.shared_w1.cols == a.dim && a.shared_w3.rows == a.inter_dim &&
                        a.shared_w3.cols == a.dim && a.shared_w2.rows == a.dim && a.shared_w2.cols == a.inter_dim,
                    "moe experts: shared expert shape");
  DSV4_CUDA_REQUIRE(a.swiglu_limit >= 0, "moe experts: swiglu_limit must be >= 0");
  DSV4_CUDA_REQUIRE(aligned16(a.shared_y), "moe experts: shared_y must be 16-byte aligned");
  if (a.tokens > 0)
    DSV4_CUDA_REQUIRE(a.x && a.y && a.indices && a.weights, "moe experts: missing x, y, indices or weights");
}

void check_args(const MoeGateParams& a) {
  DSV4_CUDA_REQUIRE(a.tokens >= 0 && a.dim > 0, "moe gate: bad sizes");
  DSV4_CUDA_REQUIRE(a.experts > 0 && a.experts <= kMoeMaxExperts, "moe gate: experts outside [1, 1024]");
  DSV4_CUDA_REQUIRE(a.topk > 0 && a.topk <= std::min(a.experts, kMoeMaxTopk), "moe gate: bad topk");
  DSV4_CUDA_REQUIRE(a.weight.type == WeightType::kBf16 || a.weight.type == WeightType::kF32,
                    "moe gate: the weight must be bf16 or f32");
  DSV4_CUDA_REQUIRE(a.weight.rows == a.experts && a.weight.cols == a.dim && a.weight.data, "moe gate: weight shape");
  DSV4_CUDA_REQUIRE(!a.tid2eid || (a.token_ids && a.vocab > 0), "moe gate: hash routing needs token_ids and vocab");
  if (a.tokens > 0) DSV4_CUDA_REQUIRE(a.x && a.indices && a.weights, "moe gate: missing x, indices or weights");
}

}  // namespace

struct MoeRunner::Impl {
  GemmRunner& gemm;
  cudaStream_t stream;
  std::array<Buffer, kBufCount> buf{};
  std::unordered_map<const void*, PointerTable> tables;

  Impl(GemmRunner& g, cudaStream_t s) : gemm(g), stream(s) {}
  ~Impl() {
    for (Buffer& b : buf) b.release(stream);
    for (auto& [key, table] : tables) table.device.release(stream);
  }

  template <typename T>
  T* get(Buf b, size_t n) {
    return buf[b].get<T>(n, stream);
  }

  PointerTable& table(const Weight* w, int experts);
  bool reencode_checked(PointerTable& t, GroupedGemmArgs one);
  void route(const MoeExpertsParams& a, int32_t* err, int n);
  void pad_routes(const MoeExpertsParams& a, int n);
  // route_here: the route is made here too, in the gather's launch (n <= kRouteFused; else route() first).
  void routed_expert(const MoeExpertsParams& a, int n, bool route_here, int32_t* err);
  void shared_expert(const MoeExpertsParams& a, bool exact);

  // Digit planes of the sorted rows' codes [n][k] when the grouped GEMM's exact route takes them
  // (GemmRunner::wants_digit_planes), else null: converted once here instead of once per column tile.
  const int8_t* digit_planes_for(GemmWeightKind kind, int64_t n, int64_t k, int experts, const uint8_t* codes) {
    if (!gemm.wants_digit_planes(kind, n, experts, k)) return nullptr;
    auto* d = get<int8_t>(kDigits, static_cast<size_t>(digit_plane_bytes(n, k)));
    digit_planes(codes, n, k, k, d, n * k, stream);
    return d;
  }
};

// Cached per weight set, keyed by expert 0's data (so that a caller's temporary host arrays do not
// pile up tables); rebuilt, stream-ordered, when any pointer differs.
PointerTable& MoeRunner::Impl::table(const Weight* w, int experts) {
  PointerTable& t = tables[w[0].data];
  bool same = t.data.size() == static_cast<size_t>(experts);
  for (int e = 0; same && e < experts; ++e) same = t.data[e] == w[e].data && t.scale[e] == w[e].scale;
  if (same) return t;
  t.data.resize(experts);
  t.scale.resize(experts);
  t.reencodes.reset();
  for (int e = 0; e < experts; ++e) {
    t.data[e] = w[e].data;
    t.scale[e] = w[e].scale;
  }
  scratch_moves(stream, "an expert pointer table");
  if (t.device.p) gemm.forget_kept_experts(t.d_data());  // their copies came from the old pointers
  t.device.release(stream);
  const void** d = t.device.get<const void*>(2 * static_cast<size_t>(experts), stream);
  // Pageable sources are staged before these calls return, so the vectors may change afterwards.
  DSV4_CUDA_CHECK(cudaMemcpyAsync(d, t.data.data(), experts * sizeof(void*), cudaMemcpyHostToDevice, stream));
  DSV4_CUDA_CHECK(
      cudaMemcpyAsync(d + experts, t.scale.data(), experts * sizeof(void*), cudaMemcpyHostToDevice, stream));
  return t;
}

// `one`'s weights (table t's; no pair) checked once for the cuBLASLt route's exact re-encoding; false
// while unknown (a stream being recorded takes no such route).
bool MoeRunner::Impl::reencode_checked(PointerTable& t, GroupedGemmArgs one) {
  if (!t.reencodes) {
    one.w_data_b = nullptr, one.w_scale_b = nullptr, one.y_b = nullptr;
    t.reencodes = gemm.fp4_experts_reencode_exactly(one);
  }
  return t.reencodes.value_or(false);
}

// Pairs sorted by expert (stable: ascending pair, hence token, within an expert), offsets, pos.
void MoeRunner::Impl::route(const MoeExpertsParams& a, int32_t* err, int n) {
  if (n <= kRouteSmall) {
    const unsigned threads = static_cast<unsigned>(std::max(kWarp, (n + kWarp - 1) / kWarp * kWarp));
    launch_kernel(route_small_kernel, 1, threads, 0, stream, a.indices, n, a.experts, get<int32_t>(kPairsSorted, n),
                  get<int32_t>(kOffsets, a.experts + 1), get<int32_t>(kPos, n), err);
    return;
  }
  auto* keys = get<uint32_t>(kKeys, n);
  auto* keys_sorted = get<uint32_t>(kKeysSorted, n);
  auto* pairs = get<int32_t>(kPairs, n);
  auto* pairs_sorted = get<int32_t>(kPairsSorted, n);
  launch_kernel(route_keys_kernel, blocks_for(n), kThreads, 0, stream, a.indices, n, a.experts, keys, pairs, err);
  const int end_bit = 32 - __builtin_clz(static_cast<unsigned>(a.experts));  // keys lie in [0, experts]
  size_t temp_bytes = 0;
  DSV4_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys, keys_sorted, pairs, pairs_sorted, n, 0,
                                                  end_bit, stream));
  void* temp = get<uint8_t>(kSortTemp, temp_bytes);
  DSV4_CUDA_CHECK(
      cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys, keys_sorted, pairs, pairs_sorted, n, 0, end_bit, stream));
  launch_kernel(route_offsets_kernel, blocks_for(int64_t{n} + 1), kThreads, 0, stream, keys_sorted, pairs_sorted, n,
                a.experts, get<int32_t>(kOffsets, a.experts + 1), get<int32_t>(kPos, n));
}

// The padded layout of the sorted pairs (route_pad_kernel): kPadOffsets, kRowPairs, and kPos again.
void MoeRunner::Impl::pad_routes(const MoeExpertsParams& a, int n) {
  const int64_t capacity = padded_rows(n, a.experts);
  launch_kernel(route_pad_kernel, blocks_for(capacity), kThreads, 0, stream,
                static_cast<const int32_t*>(buf[kOffsets].p), static_cast<const int32_t*>(buf[kPairsSorted].p),
                a.experts, capacity, get<int32_t>(kPadOffsets, a.experts + 1), get<int32_t>(kRowPairs, capacity),
                static_cast<int32_t*>(buf[kPos].p));
}

// ye [rows, dim] (in kRows) = w2(swiglu(w1(xs), w3(xs)) · weight) over the sorted rows: n of them, or
// padded to a multiple of 4 an expert where the grouped GEMM plans a cuBLASLt matmul an expert (its
// experts then take one matmul each instead of a second for their last rows, which reads the weight
// again). w1's and w3's outputs side by side in one row of 2·inter (kG), so that route takes both in
// one matmul.
void MoeRunner::Impl::routed_expert(const MoeExpertsParams& a, int n, bool route_here, int32_t* err) {
  const int64_t D = a.dim, I = a.inter_dim, wide = std::max(D, I);
  if (route_here) {  // the fused kernel below fills these
    get<int32_t>(kPairsSorted, n);
    get<int32_t>(kOffsets, a.experts + 1);
    get<int32_t>(kPos, n);
  }
  const GemmWeightKind kind1 = gemm_kind(a.w1[0].type);
  PointerTable& t1 = table(a.w1, a.experts);
  PointerTable& t3 = table(a.w3, a.experts);
  PointerTable& t2 = table(a.w2, a.experts);
  // w1 and w3 kept re-encoded for cuBLASLt (known to re-encode exactly) take that route from fewer rows an
  // expert; their plan decides the layout w2's call shares.
  bool kept = false;
  if (!route_here && kind1 == GemmWeightKind::kFp4 && gemm.policy().lt_experts_resident) {
    const GroupedGemmArgs probe{.n = I,
                                .k = D,
                                .experts = a.experts,
                                .offsets = static_cast<const int32_t*>(buf[kOffsets].p),
                                .kind = kind1,
                                .w_data = t1.d_data(),
                                .w_scale = t1.d_scale()};
    GroupedGemmArgs probe3 = probe;
    probe3.w_data = t3.d_data(), probe3.w_scale = t3.d_scale();
    kept = reencode_checked(t1, probe) && reencode_checked(t3, probe3) &&
           gemm.keeps_experts(t1.d_data(), t3.d_data(), I, D, a.experts);
  }
  const bool padded = !route_here && gemm.lt_experts_planned(kind1, n, a.experts, D, kept);
  if (padded) pad_routes(a, n);
  const int64_t m = padded ? padded_rows(n, a.experts) : n;  // rows of the layout
  const int32_t* offsets = static_cast<const int32_t*>(buf[padded ? kPadOffsets : kOffsets].p);
  const int32_t* routed = offsets + a.experts;
  const int32_t* pairs = static_cast<const int32_t*>(buf[padded ? kRowPairs : kPairsSorted].p);
  // kRowSlack rows past the layout's in the codes and outputs: the grouped GEMM's cuBLASLt route
  // may read and overwrite them (GroupedGemmArgs::row_slack).
  constexpr int kRowSlack = 3;
  auto* rows = get<uint16_t>(kRows, (m + kRowSlack) * D);
  auto* codes = get<uint8_t>(kCodes, (m + kRowSlack) * wide);
  auto* scales = get<float>(kScales, m * (wide / 128));
  auto* g = get<uint16_t>(kG, (m + kRowSlack) * 2 * I);
  uint16_t* u = g + I;
  GroupedGemmArgs gg{.a_codes = codes,
                     .a_scales = scales,
                     .scale_ld = m,
                     .rows = m,
                     .n = I,
                     .k = D,
                     .experts = a.experts,
                     .offsets = offsets,
                     .kind = kind1,
                     .w_data = t1.d_data(),
                     .w_scale = t1.d_scale(),
                     .y = g,
                     .y_ld = 2 * I,
                     .a_digit_stride = m * D,
                     .w_data_b = t3.d_data(),
                     .w_scale_b = t3.d_scale(),
                     .y_b = u,
                     .row_slack = kRowSlack};
  if (route_here) {
    launch_kernel(route_gather_quantize_kernel, warp_blocks(quant_warps(n, D)), kThreads, 0, stream, a.indices, n,
                  a.experts, a.x, D, a.topk, static_cast<int32_t*>(buf[kPairsSorted].p),
                  static_cast<int32_t*>(buf[kOffsets].p), static_cast<int32_t*>(buf[kPos].p), codes, scales, err);
  } else {
    launch_kernel(gather_quantize_kernel, warp_blocks(quant_warps(m, D)), kThreads, 0, stream, a.x, m, D, pairs, a.topk,
                  routed, codes, scales);
  }
  gg.a_digits = digit_planes_for(kind1, m, D, a.experts, codes);
  if (padded && kind1 == GemmWeightKind::kFp4) {
    GroupedGemmArgs w3 = gg;
    w3.w_data = t3.d_data(), w3.w_scale = t3.d_scale();
    gg.reencode_checked = reencode_checked(t1, gg) && reencode_checked(t3, w3);
  }
  gemm.grouped(gg);  // w1 and w3 together

  const auto swiglu_quantize =
      gemm.policy().numerics == Numerics::kFast ? swiglu_quantize_kernel<true> : swiglu_quantize_kernel<false>;
  launch_kernel(swiglu_quantize, warp_blocks(quant_warps(m, I)), kThreads, 0, stream, g, u, 2 * I, m, I, a.swiglu_limit,
                a.weights, pairs, routed, codes, scales);
  const GemmWeightKind kind2 = gemm_kind(a.w2[0].type);
  gg.w_data_b = nullptr, gg.w_scale_b = nullptr, gg.y_b = nullptr;
  gg.n = D, gg.k = I, gg.kind = kind2, gg.w_data = t2.d_data(), gg.w_scale = t2.d_scale(), gg.y = rows, gg.y_ld = 0;
  gg.a_digits = digit_planes_for(kind2, m, I, a.experts, codes);
  gg.a_digit_stride = m * I;
  // The offsets the pair's call read (nothing between writes them): w2's call reads nothing more on the
  // host where its weights are known to re-encode exactly.
  gg.same_offsets = true;
  gg.offsets_settled = true;  // the pair's call and swiglu_quantize lie between their writer and w2's call
  gg.reencode_checked = padded && kind2 == GemmWeightKind::kFp4 && reencode_checked(t2, gg);
  gemm.grouped(gg);
}

// ys [tokens, dim] (kSharedY), reusing kG / kU after the routed pass.
void MoeRunner::Impl::shared_expert(const MoeExpertsParams& a, bool exact) {
  const int64_t T = a.tokens, I = a.inter_dim;
  const SharedExpertParams p{.x = a.x,
                             .tokens = T,
                             .dim = a.dim,
                             .inter_dim = I,
                             .w1 = a.shared_w1,
                             .w3 = a.shared_w3,
                             .w2 = a.shared_w2,
                             .y = get<uint16_t>(kSharedY, T * a.dim)};
  cuda::shared_expert(gemm, p, exact, get<uint16_t>(kG, T * I), get<uint16_t>(kU, T * I), stream);
}

void moe_combine(const MoeCombineParams& p, cudaStream_t stream) {
  if (p.tokens == 0) return;
  DSV4_CUDA_REQUIRE(p.topk <= kMoeMaxTopk, "moe_combine: topk above the kernel's 32");
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(p.tokens, int64_t{1} << 16));
  launch_kernel(combine_pairs_kernel, grid, kThreads, 0, stream, p);
}

void swiglu(const SwigluParams& p, bool fast, cudaStream_t stream) {
  if (p.rows == 0) return;
  const bool vec = p.dim % 8 == 0 && aligned16(p.g) && aligned16(p.u) && aligned16(p.out);
  if (!vec) {
    launch_kernel(fast ? swiglu_elementwise_kernel<true> : swiglu_elementwise_kernel<false>, blocks_for(p.rows * p.dim),
                  kThreads, 0, stream, p);
    return;
  }
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(p.rows, int64_t{1} << 20));
  const int threads = static_cast<int>(std::min<int64_t>(p.dim / 8, kThreads));
  launch_kernel(fast ? swiglu_kernel<true> : swiglu_kernel<false>, grid, threads, 0, stream, p);
}

void shared_expert(GemmRunner& gemm, const SharedExpertParams& p, bool exact, uint16_t* g, uint16_t* u,
                   cudaStream_t stream) {
  const int64_t T = p.tokens, I = p.inter_dim;
  gemm.run_pair({.x = p.x, .rows = T, .w = gemm_weight(p.w1), .y = g, .out = GemmOut::kBf16, .exact = exact},
                gemm_weight(p.w3), u);
  swiglu({.g = g, .u = u, .rows = T, .dim = I, .out = g}, !exact && gemm.policy().numerics == Numerics::kFast, stream);
  gemm.run({.x = g, .rows = T, .w = gemm_weight(p.w2), .y = p.y, .out = GemmOut::kBf16, .exact = exact});
}

MoeRunner::MoeRunner(GemmRunner& gemm, cudaStream_t stream) : impl_(std::make_unique<Impl>(gemm, stream)) {}
MoeRunner::~MoeRunner() = default;

void MoeRunner::gate(const MoeGateParams& a, int32_t* err) {
  check_args(a);
  if (a.tokens == 0) return;
  Impl& m = *impl_;
  float* z = m.get<float>(kZ, static_cast<size_t>(a.tokens) * a.experts);
  m.gemm.run({.x = a.x, .rows = a.tokens, .w = gemm_weight(a.weight), .y = z, .out = GemmOut::kF32});
  const GateLaunch k{a, z, err};
  const size_t smem = 2 * static_cast<size_t>(a.experts) * sizeof(float);
  launch_kernel(gate_kernel, static_cast<unsigned>(a.tokens), kGateThreads, smem, m.stream, k);
}

void MoeRunner::experts(const MoeExpertsParams& a, int32_t* err, bool exact_shared,
                        const std::function<void()>& before_combine) {
  check_args(a);
  if (a.tokens == 0) return;
  Impl& m = *impl_;
  const int n = static_cast<int>(a.tokens * a.topk);
  const bool fused_route = n <= kRouteFused;  // a decode step's pairs: routed in the gather's launch
  if (!fused_route) m.route(a, err, n);
  m.routed_expert(a, n, fused_route, err);
  if (!a.shared_y) m.shared_expert(a, exact_shared);
  if (before_combine) before_combine();
  const void* shared = a.shared_y ? a.shared_y : m.buf[kSharedY].p;
  const int threads = static_cast<int>(std::min<int64_t>(a.dim / 8, 512));
  const bool y_vec = aligned16(a.y);
  launch_kernel(combine_kernel, static_cast<unsigned>(a.tokens), threads, 0, m.stream,
                static_cast<const uint4*>(m.buf[kRows].p), static_cast<const uint4*>(shared),
                static_cast<const int32_t*>(m.buf[kPos].p), a.topk, a.dim, a.y, y_vec);
}

}  // namespace dsv4::cuda
