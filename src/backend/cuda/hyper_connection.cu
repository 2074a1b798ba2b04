#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <limits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/glibc_expf.cuh"
#include "backend/cuda/hyper_connection.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/ptx.cuh"
#include "backend/cuda/row_kernels.h"

// Bit-exact with backend/cpu/hyper_connection.cpp: the mix is the CPU's plain fp32 GEMM (one sequential
// sum over k per output), rs its 8-lane sum of squares, exp is glibc's expf, and no product is fused
// into a sum. One warp per token: lane o owns output o's chain, the lanes after the outputs own the 8
// sum-of-squares chains; the block stages chunks of fn and of its tokens' rows in shared memory.
//
// Few tokens (decode) leave that kernel with one live warp, whose chunk loop exposes the memory latency at
// every step. There a chain kernel runs instead: a CTA per (mix output, group of tokens) stages the whole fn
// row and its tokens' rows in shared memory at once, so one lane per token runs its chain at the pace of the
// dependent adds alone; a finishing kernel then spreads the epilogue and the weighted streams over CTAs.
namespace dsv4::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kTokens = kThreads / kWarp;  // tokens per block, one warp each
constexpr int kMaxHc = 8;
constexpr int kSqLanes = 8;  // the CPU's sum_squares lanes

// Element e (0-7) of eight bf16 values held in a 16-byte unit, as fp32.
__device__ __forceinline__ float bf16_lane(const uint4& v, int e) {
  const uint32_t w = (&v.x)[e / 2];
  return __uint_as_float(e % 2 == 0 ? w << 16 : w & 0xffff0000u);
}

// hc_pre as its kernels get it, with the rows of fn; hc_head runs as an hc_pre with mix = hc and no
// post or comb (head_as_pre), so one set of kernels serves both.
struct HcLaunch : HcPreParams {
  int mix = 0;  // rows of fn
};

// kSlots chains per lane (mix outputs, then the sum-of-squares lanes); kChunk columns staged per step.
template <int kSlots>
struct Geo {
  static constexpr int kChunk = kSlots == 1 ? 128 : 64;
  static constexpr int kStride = kChunk + 4;  // padded fn rows: lanes of different rows hit different banks
  static constexpr int kWLoads = kSlots * kWarp * kChunk / kThreads;
  static constexpr int kXLoads = kTokens * kChunk / kThreads;
  static constexpr int kEpi = kSlots * kWarp + kMaxHc + kMaxHc * kMaxHc;  // per-warp epilogue floats
};

// One chunk's global loads, held in registers while the previous chunk is summed.
template <int kSlots>
struct Prefetch {
  float w[Geo<kSlots>::kWLoads];
  float x[Geo<kSlots>::kXLoads];
};

// Thread i stages column i % kChunk of rows i / kChunk + j * kRowStep (fn rows, then the tokens' rows).
template <int kSlots>
__device__ void load_chunk(const HcLaunch& a, int64_t t0, int64_t c0, int len, Prefetch<kSlots>& p) {
  using G = Geo<kSlots>;
  constexpr int kRowStep = kThreads / G::kChunk;
  const int64_t width = a.hc * a.dim;
  const int col = threadIdx.x % G::kChunk, row0 = threadIdx.x / G::kChunk;
  const bool in = col < len;
  const float* w = a.fn + c0 + col + row0 * width;
#pragma unroll
  for (int i = 0; i < G::kWLoads; ++i)
    p.w[i] = in && row0 + i * kRowStep < a.mix ? __ldg(w + i * kRowStep * width) : 0.0f;
  const uint16_t* x = a.h + (t0 + row0) * width + c0 + col;
#pragma unroll
  for (int i = 0; i < G::kXLoads; ++i)
    p.x[i] = in && t0 + row0 + i * kRowStep < a.tokens ? load_bf16(x + i * kRowStep * width) : 0.0f;
}

template <int kSlots>
__device__ void store_chunk(const Prefetch<kSlots>& p, int mix, float* ws, float* xs) {
  using G = Geo<kSlots>;
  constexpr int kRowStep = kThreads / G::kChunk;
  const int col = threadIdx.x % G::kChunk, row0 = threadIdx.x / G::kChunk;
#pragma unroll
  for (int i = 0; i < G::kWLoads; ++i)
    if (row0 + i * kRowStep < mix) ws[(row0 + i * kRowStep) * G::kStride + col] = p.w[i];
#pragma unroll
  for (int i = 0; i < G::kXLoads; ++i) xs[threadIdx.x + i * kThreads] = p.x[i];
}

// Eight columns of x and of a fn row.
struct Cols8 {
  float4 x0, x1, w0, w1;
};
__device__ __forceinline__ Cols8 load8(const float* w, const float* x, int k) {
  return {*reinterpret_cast<const float4*>(x + k), *reinterpret_cast<const float4*>(x + k + 4),
          *reinterpret_cast<const float4*>(w + k), *reinterpret_cast<const float4*>(w + k + 4)};
}
__device__ __forceinline__ float add4(float acc, float4 x, float4 w) {
  acc = __fadd_rn(acc, __fmul_rn(x.x, w.x));
  acc = __fadd_rn(acc, __fmul_rn(x.y, w.y));
  acc = __fadd_rn(acc, __fmul_rn(x.z, w.z));
  return __fadd_rn(acc, __fmul_rn(x.w, w.w));
}

// acc + sum_k x[k]*w[k], k ascending, each product and sum rounded (the CPU's plain GEMM chain). The
// next eight columns load while the current eight are added, so the dependent adds set the pace.
__device__ __forceinline__ float dot_run(const float* w, const float* x, int len, float acc) {
  int k = 0;
  if (len >= 8) {
    Cols8 c = load8(w, x, 0);
    for (; k + 16 <= len; k += 8) {
      const Cols8 next = load8(w, x, k + 8);
      acc = add4(add4(acc, c.x0, c.w0), c.x1, c.w1);
      c = next;
    }
    acc = add4(add4(acc, c.x0, c.w0), c.x1, c.w1);
    k += 8;
  }
  for (; k < len; ++k) acc = __fadd_rn(acc, __fmul_rn(x[k], w[k]));
  return acc;
}

// Sum-of-squares lane j of a chunk that starts at a multiple of 8: elements j, j+8, ...
__device__ __forceinline__ float squares_run(const float* x, int j, int len, float acc) {
  for (int k = j; k < len; k += kSqLanes) acc = __fadd_rn(acc, __fmul_rn(x[k], x[k]));
  return acc;
}

// res = [mix raw sums, 8 sum-of-squares lanes]: the CPU's lane combine, rs = 1/sqrt(ss/width + eps), and
// res[o] *= rs (one warp).
__device__ void scale_by_rms(const HcLaunch& a, float* res) {
  const float* l = res + a.mix;
  const float ss = __fadd_rn(__fadd_rn(__fadd_rn(l[0], l[1]), __fadd_rn(l[2], l[3])),
                             __fadd_rn(__fadd_rn(l[4], l[5]), __fadd_rn(l[6], l[7])));
  const float width = static_cast<float>(a.hc * a.dim);
  const float rs = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, width), a.norm_eps)));
  for (int o = threadIdx.x % kWarp; o < a.mix; o += kWarp) res[o] = __fmul_rn(res[o], rs);
  __syncwarp();
}

// Leaves this warp's token's mix (times rs) in res[0, mix), res = smem + warp * kEpi; the whole block calls.
template <int kSlots>
__device__ void token_mix(const HcLaunch& a, float* smem, float* res) {
  using G = Geo<kSlots>;
  const int64_t t0 = int64_t{blockIdx.x} * kTokens, width = a.hc * a.dim;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const bool live = t0 + warp < a.tokens;
  const int wsize = a.mix * G::kStride;  // buffers: fn rows [2][mix][kStride], then rows [2][kTokens][kChunk]
  float acc[kSlots];
  for (int r = 0; r < kSlots; ++r) acc[r] = 0.0f;
  const int64_t chunks = (width + G::kChunk - 1) / G::kChunk;
  const auto len = [&](int64_t c) { return static_cast<int>(min(int64_t{G::kChunk}, width - c * G::kChunk)); };
  // Two chunks in flight in registers (p: the next to store, q: the one after): one chunk's dependent
  // adds alone do not cover a global load's latency when a single token's warp is working (decode).
  Prefetch<kSlots> p, q;
  load_chunk(a, t0, 0, len(0), p);
  if (chunks > 1) load_chunk(a, t0, G::kChunk, len(1), q);
  for (int64_t c = 0; c < chunks; ++c) {
    const int b = static_cast<int>(c & 1), n = len(c);
    float* ws = smem + b * wsize;
    float* xs = smem + 2 * wsize + b * kTokens * G::kChunk;
    store_chunk(p, a.mix, ws, xs);  // buffer b was last read two chunks ago, before the previous barrier
    __syncthreads();
    p = q;
    if (c + 2 < chunks) load_chunk(a, t0, (c + 2) * G::kChunk, len(c + 2), q);
    const float* xr = xs + warp * G::kChunk;
#pragma unroll
    for (int r = 0; r < kSlots && live; ++r) {
      const int o = lane + r * kWarp;
      if (o < a.mix) {
        acc[r] = dot_run(ws + o * G::kStride, xr, n, acc[r]);
      } else if (o < a.mix + kSqLanes) {
        acc[r] = squares_run(xr, o - a.mix, n, acc[r]);
      }
    }
  }
  __syncthreads();  // the staging buffers become the epilogue area
  if (!live) return;
#pragma unroll
  for (int r = 0; r < kSlots; ++r)
    if (lane + r * kWarp < a.mix + kSqLanes) res[lane + r * kWarp] = acc[r];
  __syncwarp();
  scale_by_rms(a, res);
}

__device__ __forceinline__ float sigmoid(float v) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, host_expf(-v))); }
__device__ __forceinline__ float affine(float m, float s, float b) { return __fadd_rn(__fmul_rn(m, s), b); }

// Element j of a warp's hc*hc matrix held S per lane (element e in lane e % 32, slot e / 32); every
// lane of the warp takes part.
template <int S>
__device__ __forceinline__ float element(const float (&v)[S], int j) {
  const float a = __shfl_sync(0xffffffffu, v[0], j % kWarp);
  if constexpr (S == 1) {
    return a;
  } else {
    const float b = __shfl_sync(0xffffffffu, v[1], j % kWarp);
    return j < kWarp ? a : b;
  }
}

// The CPU's sinkhorn on c[hc*hc] with the matrix in registers (one warp): every sum in the CPU's order
// from shuffled elements, divisions per element. Lanes past the matrix shadow element 0 and store
// nothing. kHc > 0 fixes hc at compile time, so that a sum's shuffles are issued together ahead of its
// dependent adds (the Sinkhorn is one warp's latency chain on hc_pre's path).
template <int S, int kHc = 0>
__device__ void sinkhorn_lanes(float* c, int hc_arg, int iters, float eps) {
  const int hc = kHc > 0 ? kHc : hc_arg;
  const int n = hc * hc, lane = threadIdx.x % kWarp;
  int row[S], col[S];
  float v[S];
#pragma unroll
  for (int i = 0; i < S; ++i) {
    const int e = lane + i * kWarp < n ? lane + i * kWarp : 0;
    row[i] = e / hc * hc, col[i] = e % hc, v[i] = c[e];
  }
  __syncwarp();
  const auto row_sum = [&](int i) {
    float s = 0;
#pragma unroll
    for (int k = 0; k < hc; ++k) s = __fadd_rn(s, element(v, row[i] + k));
    return s;
  };
  const auto col_sum = [&](int i) {
    float s = 0;
#pragma unroll
    for (int j = 0; j < hc; ++j) s = __fadd_rn(s, element(v, j * hc + col[i]));
    return s;
  };
  // Each step reads all elements (shuffles) before any lane replaces its own.
  const auto step = [&](auto f) {
    float next[S];
#pragma unroll
    for (int i = 0; i < S; ++i) next[i] = f(i);
#pragma unroll
    for (int i = 0; i < S; ++i) v[i] = next[i];
  };
  step([&](int i) {
    float mx = element(v, row[i]);
#pragma unroll
    for (int k = 1; k < hc; ++k) {
      const float y = element(v, row[i] + k);
      mx = mx < y ? y : mx;  // std::max_element
    }
    return host_expf(__fsub_rn(v[i], mx));
  });
  step([&](int i) { return __fadd_rn(__fdiv_rn(v[i], row_sum(i)), eps); });
  step([&](int i) { return __fdiv_rn(v[i], __fadd_rn(col_sum(i), eps)); });
  for (int it = 1; it < iters; ++it) {
    step([&](int i) { return __fdiv_rn(v[i], __fadd_rn(row_sum(i), eps)); });
    step([&](int i) { return __fdiv_rn(v[i], __fadd_rn(col_sum(i), eps)); });
  }
#pragma unroll
  for (int i = 0; i < S; ++i)
    if (lane + i * kWarp < n) c[lane + i * kWarp] = v[i];
  __syncwarp();
}

__device__ void sinkhorn(float* c, int hc, int iters, float eps) {
  if (hc == 4) return sinkhorn_lanes<1, 4>(c, hc, iters, eps);  // every V4 checkpoint (hc_mult 4)
  if (hc * hc <= kWarp) return sinkhorn_lanes<1>(c, hc, iters, eps);
  sinkhorn_lanes<2>(c, hc, iters, eps);
}

// y[c] = bf16(sum_j pre_j * X_j[c]), j ascending.
__device__ __forceinline__ uint16_t weighted_column(const uint16_t* X, const float* pre, int hc, int64_t dim,
                                                    int64_t c) {
  float acc = 0;
  for (int j = 0; j < hc; ++j) acc = __fadd_rn(acc, __fmul_rn(pre[j], load_bf16(X + j * dim + c)));
  return f_to_bf16(acc);
}

// pre[hc] (shared memory) from token t's scaled mix m. One warp.
__device__ void pre_weights(const HcLaunch& a, const float* m, float* pre) {
  const int lane = threadIdx.x % kWarp, hc = a.hc;
  if (lane < hc) pre[lane] = __fadd_rn(sigmoid(affine(m[lane], a.scale[0], a.base[lane])), a.hc_eps);
  __syncwarp();
}

// Token t's post and comb (the Sinkhorn in cm, shared memory) from its scaled mix m. One warp.
__device__ void post_comb(const HcLaunch& a, const float* m, float* cm, int64_t t) {
  const int lane = threadIdx.x % kWarp, hc = a.hc;
  if (lane < hc) a.post[t * hc + lane] = __fmul_rn(2.0f, sigmoid(affine(m[hc + lane], a.scale[1], a.base[hc + lane])));
  for (int e = lane; e < hc * hc; e += kWarp) cm[e] = affine(m[2 * hc + e], a.scale[2], a.base[2 * hc + e]);
  __syncwarp();
  sinkhorn(cm, hc, a.sinkhorn_iters, a.hc_eps);
  for (int e = lane; e < hc * hc; e += kWarp) a.comb[t * hc * hc + e] = cm[e];
  __syncwarp();
}

// From token t's scaled mix m: pre[hc], and with kPre and `write` the token's post and comb. One warp.
template <bool kPre>
__device__ void mix_outputs(const HcLaunch& a, const float* m, float* pre, float* cm, int64_t t, bool write) {
  pre_weights(a, m, pre);
  if (kPre && write) post_comb(a, m, cm, t);
}

template <int kSlots, bool kPre>
__global__ void __launch_bounds__(kThreads, 2) hc_kernel(HcLaunch a) {
  pdl_enter();
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  const int warp = threadIdx.x / kWarp;
  const int64_t t = int64_t{blockIdx.x} * kTokens + warp;
  float* m = smem + warp * Geo<kSlots>::kEpi;
  float* pre = m + kSlots * kWarp;
  token_mix<kSlots>(a, smem, m);
  if (t >= a.tokens) return;
  mix_outputs<kPre>(a, m, pre, pre + kMaxHc, t, true);
  const uint16_t* X = a.h + t * a.hc * a.dim;
  for (int64_t c = threadIdx.x % kWarp; c < a.dim; c += kWarp)
    a.x[t * a.dim + c] = weighted_column(X, pre, a.hc, a.dim, c);
}

template <int kSlots, bool kPre>
void launch(const HcLaunch& a, cudaStream_t stream) {
  using G = Geo<kSlots>;
  const int stage = 2 * a.mix * G::kStride + 2 * kTokens * G::kChunk;
  const size_t bytes = sizeof(float) * static_cast<size_t>(std::max(stage, kTokens * G::kEpi));
  const auto blocks = static_cast<unsigned>((a.tokens + kTokens - 1) / kTokens);
  launch_kernel(hc_kernel<kSlots, kPre>, blocks, kThreads, bytes, stream, a);
}

template <bool kPre>
void run_wide(const HcLaunch& a, cudaStream_t stream) {
  switch ((a.mix + kSqLanes + kWarp - 1) / kWarp) {
    case 1:
      return launch<1, kPre>(a, stream);
    case 2:
      return launch<2, kPre>(a, stream);
    default:
      return launch<3, kPre>(a, stream);
  }
}

// ---- The chain path (few tokens) ----

constexpr int64_t kChainMaxTokens = 64;  // beyond this the wide kernel's warps per token are faster
constexpr int kChainMaxGroup = 4;        // tokens per chain CTA (one lane each)
constexpr int kRowPad = 8;               // bf16 per staged row: the group's lanes read different banks

// Copies `n` elements of src to dst with the whole CTA; kVec: 16-byte aligned and n*sizeof(T) % 16 == 0.
template <bool kVec, typename T>
__device__ void stage_row(T* dst, const T* src, int64_t n) {
  if constexpr (kVec) {
    const int64_t chunks = n * static_cast<int64_t>(sizeof(T)) / 16;
    for (int64_t i = threadIdx.x; i < chunks; i += blockDim.x)
      cp_async<16>(reinterpret_cast<uint4*>(dst) + i, reinterpret_cast<const uint4*>(src) + i);
  } else {
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
  }
}

__device__ __forceinline__ float lo_bf16(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float hi_bf16(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ float add_pair(float acc, uint32_t xw, float w0, float w1) {
  acc = __fadd_rn(acc, __fmul_rn(lo_bf16(xw), w0));
  return __fadd_rn(acc, __fmul_rn(hi_bf16(xw), w1));
}

// acc = sum_k x[k]*w[k], k ascending from 0, every product and sum rounded: the CPU's chain. Eight columns
// are loaded while the previous eight are added, so the dependent adds set the pace.
template <bool kVec>
__device__ float chain_dot(const float* w, const uint16_t* x, int64_t n) {
  float acc = 0;
  int64_t k = 0;
  if constexpr (kVec) {
    const auto* w4 = reinterpret_cast<const float4*>(w);
    const auto* x4 = reinterpret_cast<const uint4*>(x);
    float4 a = w4[0], b = w4[1];
    uint4 v = x4[0];
    for (; k + 16 <= n; k += 8) {
      const float4 na = w4[k / 4 + 2], nb = w4[k / 4 + 3];
      const uint4 nv = x4[k / 8 + 1];
      acc = add_pair(add_pair(acc, v.x, a.x, a.y), v.y, a.z, a.w);
      acc = add_pair(add_pair(acc, v.z, b.x, b.y), v.w, b.z, b.w);
      a = na, b = nb, v = nv;
    }
    if (k + 8 <= n) {
      acc = add_pair(add_pair(acc, v.x, a.x, a.y), v.y, a.z, a.w);
      acc = add_pair(add_pair(acc, v.z, b.x, b.y), v.w, b.z, b.w);
      k += 8;
    }
  }
  for (; k < n; ++k) acc = __fadd_rn(acc, __fmul_rn(bf16_to_f(x[k]), w[k]));
  return acc;
}

// A single token's chain with its products made first (kProducts): the whole CTA rounds w[k] = x[k]·w[k]
// in place over the staged fn row, and the chain lane then only adds, four products per shared-memory
// load, kRing loads ahead: one dependent add per column, nothing else on its path.
constexpr int kRing = 8;

__device__ void products_in_place(float* w, const uint16_t* x, int64_t n) {
  for (int64_t k = threadIdx.x; k < n; k += blockDim.x) w[k] = __fmul_rn(bf16_to_f(x[k]), w[k]);
}

__device__ __forceinline__ float add4(float acc, float4 v) {
  return __fadd_rn(__fadd_rn(__fadd_rn(__fadd_rn(acc, v.x), v.y), v.z), v.w);
}

// acc + sum_k p[k], k ascending, every add rounded (p 16-byte aligned).
__device__ float chain_sum(const float* p, int64_t n, float acc = 0.0f) {
  const auto* p4 = reinterpret_cast<const float4*>(p);
  const int groups = static_cast<int>(n / 4);  // a staged row: far below 2^31
  float4 ring[kRing];
#pragma unroll
  for (int j = 0; j < kRing; ++j)
    if (j < groups) ring[j] = p4[j];
  int g0 = 0;
  for (; g0 + kRing <= groups; g0 += kRing) {
#pragma unroll
    for (int j = 0; j < kRing; ++j) {
      acc = add4(acc, ring[j]);
      if (g0 + j + kRing < groups) ring[j] = p4[g0 + j + kRing];
    }
  }
#pragma unroll
  for (int j = 0; j < kRing; ++j)  // the last groups, loaded by the final refills
    if (g0 + j < groups) acc = add4(acc, ring[j]);
  for (int64_t k = int64_t{groups} * 4; k < n; ++k) acc = __fadd_rn(acc, p[k]);
  return acc;
}

// CTA (o, g): output o < mix of the tokens of group g (o == mix: their eight sum-of-squares lanes) into
// raw[t][mix + 8]. Shared memory: fn row o (fp32, absent for o == mix), then the group's rows (bf16, padded).
template <bool kVec, bool kProducts>
__global__ void __launch_bounds__(kThreads) hc_chain_kernel(HcLaunch a, int group, float* raw) {
  extern __shared__ float4 smem4[];
  const int o = static_cast<int>(blockIdx.x);
  const bool squares = o == a.mix;
  const int64_t width = a.hc * a.dim, stride = width + kRowPad, t0 = int64_t{blockIdx.y} * group;
  const int n = static_cast<int>(min(int64_t{group}, a.tokens - t0));
  float* w = reinterpret_cast<float*>(smem4);
  auto* xs = reinterpret_cast<uint16_t*>(w + (squares ? 0 : (width + 3) / 4 * 4));
  // fn is a weight (no kernel writes it): its row is staged while the previous kernel finishes.
  if (!squares) stage_row<kVec>(w, a.fn + o * width, width);
  pdl_enter();
  for (int g = 0; g < n; ++g) stage_row<kVec>(xs + g * stride, a.h + (t0 + g) * width, width);
  if constexpr (kVec) cp_async_wait_all();
  __syncthreads();
  const int lane = static_cast<int>(threadIdx.x);
  const int64_t row = a.mix + kSqLanes;
  if (kProducts && !squares) {
    products_in_place(w, xs, width);
    __syncthreads();
    if (lane == 0) raw[t0 * row + o] = chain_sum(w, width);
  } else if (!squares) {
    if (lane < n) raw[(t0 + lane) * row + o] = chain_dot<kVec>(w, xs + lane * stride, width);
  } else if (lane < n * kSqLanes) {
    const uint16_t* x = xs + lane / kSqLanes * stride;
    float acc = 0;
    for (int64_t k = lane % kSqLanes; k < width; k += kSqLanes) {
      const float v = bf16_to_f(x[k]);
      acc = __fadd_rn(acc, __fmul_rn(v, v));
    }
    raw[(t0 + lane / kSqLanes) * row + a.mix + lane % kSqLanes] = acc;
  }
}

// ---- The ring path (few tokens): producer warps make the products a chunk ahead of the chains ----
//
// The products-first CTA above stages the whole row and makes every product before its chain starts, and
// serves one token a CTA. Here CTA (o, g) streams fn row o and its group's rows through shared memory in
// chunks: six producer warps copy chunk c+1 while they round chunk c's products into a ring of slots, and
// the two consumer warps' chain lanes (a token each; eight a token for the sum of squares, o == mix) add
// slot after slot as named barriers release them. The chains start after one chunk, and a CTA serves up
// to eight tokens, so a decode batch of 32 fits one wave. Same products, same order, same bits.
constexpr int kRingChunk = 1024;  // columns a chunk
constexpr int kRingSlots = 4;     // chunks of products in flight
constexpr int kRingMaxGroup = 8;  // tokens a CTA: 64 sum-of-squares lanes, the consumer warps
constexpr int kConsumers = 2 * kWarp;
constexpr int kProducers = kThreads - kConsumers;
constexpr int kSlotPad = 4;  // floats after a token's chunk of products: its chain lane reads other banks
// Named barriers: slot s full (1 + s) and free (1 + slots + s), and the producers' own.
constexpr int kBarFull = 1, kBarFree = kBarFull + kRingSlots, kBarProducers = kBarFree + kRingSlots;

struct RingLayout {
  int group;
  __host__ __device__ int64_t token_floats() const { return kRingChunk + kSlotPad; }
  __host__ __device__ int64_t slot_floats() const { return group * token_floats(); }
  // Staging after the ring: two buffers of [fn chunk (fp32), group rows' chunks (bf16)].
  __host__ __device__ int64_t stage_at() const { return kRingSlots * slot_floats() * 4; }
  __host__ __device__ int64_t stage_bytes() const { return kRingChunk * 4 + int64_t{group} * kRingChunk * 2; }
  __host__ __device__ int64_t bytes() const { return stage_at() + 2 * stage_bytes(); }
};

// Producer thread p's cp.async copies of chunk c (columns [k0, k0 + len)) into staging buffer `st`.
__device__ void ring_stage(const HcLaunch& a, int o, int64_t t0, int n, int64_t k0, int len, uint8_t* st, int p) {
  const int64_t width = a.hc * a.dim;
  if (o < a.mix) {
    const float* src = a.fn + o * width + k0;
    for (int u = p; u < len / 4; u += kProducers) cp_async<16>(st + u * 16, src + u * 4);
  }
  auto* xs = st + kRingChunk * 4;
  for (int g = 0; g < n; ++g) {
    const uint16_t* src = a.h + (t0 + g) * width + k0;
    for (int u = p; u < len / 8; u += kProducers) cp_async<16>(xs + g * kRingChunk * 2 + u * 16, src + u * 8);
  }
}

// Rounds the staged chunk's products x·w (x·x for the sum of squares) into a slot, four columns a step.
__device__ void ring_products(bool squares, int n, int len, const uint8_t* st, float* slot, int64_t token_floats,
                              int p) {
  const auto* w4 = reinterpret_cast<const float4*>(st);
  for (int g = 0; g < n; ++g) {
    const auto* x2 = reinterpret_cast<const uint2*>(st + kRingChunk * 4 + g * kRingChunk * 2);
    auto* out = reinterpret_cast<float4*>(slot + g * token_floats);
    for (int q = p; q < len / 4; q += kProducers) {
      const uint2 xv = x2[q];
      const float4 x = {lo_bf16(xv.x), hi_bf16(xv.x), lo_bf16(xv.y), hi_bf16(xv.y)};
      const float4 w = squares ? x : w4[q];
      out[q] = {__fmul_rn(x.x, w.x), __fmul_rn(x.y, w.y), __fmul_rn(x.z, w.z), __fmul_rn(x.w, w.w)};
    }
  }
}

__device__ void ring_produce(const HcLaunch& a, int o, int64_t t0, int n, const RingLayout& L, float* ring,
                             uint8_t* stage) {
  const int64_t width = a.hc * a.dim;
  const int chunks = static_cast<int>((width + kRingChunk - 1) / kRingChunk), p = threadIdx.x - kConsumers;
  const auto len = [&](int c) { return static_cast<int>(min(int64_t{kRingChunk}, width - int64_t{c} * kRingChunk)); };
  ring_stage(a, o, t0, n, 0, len(0), stage, p);
  cp_async_commit();
  for (int c = 0; c < chunks; ++c) {
    cp_async_wait_all();
    bar_sync(kBarProducers, kProducers);  // chunk c staged; chunk c-1's buffer read by every producer
    if (c + 1 < chunks)
      ring_stage(a, o, t0, n, int64_t{c + 1} * kRingChunk, len(c + 1), stage + (c + 1) % 2 * L.stage_bytes(), p);
    cp_async_commit();
    const int s = c % kRingSlots;
    if (c >= kRingSlots) bar_sync(kBarFree + s, kThreads);
    ring_products(o == a.mix, n, len(c), stage + c % 2 * L.stage_bytes(), ring + s * L.slot_floats(), L.token_floats(),
                  p);
    bar_arrive(kBarFull + s, kThreads);
  }
}

// Chain lanes: token t's mix output (lane t), or its sum-of-squares lane j (lane 8t + j: elements j, j+8, ...).
__device__ void ring_consume(const HcLaunch& a, int o, int64_t t0, int n, const RingLayout& L, const float* ring,
                             float* raw) {
  const int64_t width = a.hc * a.dim, row = a.mix + kSqLanes;
  const int chunks = static_cast<int>((width + kRingChunk - 1) / kRingChunk), lane = threadIdx.x;
  const bool squares = o == a.mix;
  const int t = squares ? lane / kSqLanes : lane, j = lane % kSqLanes;
  const bool active = t < n;
  float acc = 0;
  for (int c = 0; c < chunks; ++c) {
    const int s = c % kRingSlots;
    const int len = static_cast<int>(min(int64_t{kRingChunk}, width - int64_t{c} * kRingChunk));
    bar_sync(kBarFull + s, kThreads);
    const float* mine = ring + s * L.slot_floats() + t * L.token_floats();
    if (active && !squares) acc = chain_sum(mine, len, acc);
    if (active && squares)
      for (int k = j; k < len; k += kSqLanes) acc = __fadd_rn(acc, mine[k]);
    if (c + kRingSlots < chunks) bar_arrive(kBarFree + s, kThreads);
  }
  if (active) raw[(t0 + t) * row + (squares ? a.mix + j : o)] = acc;
}

// CTA (o, g): as hc_chain_kernel's, the chunks streamed (h, fn and width 16-byte multiples of 8 columns).
__global__ void __launch_bounds__(kThreads) hc_ring_kernel(HcLaunch a, int group, float* raw) {
  pdl_enter();
  extern __shared__ float4 smem4[];
  const RingLayout L{group};
  const int o = static_cast<int>(blockIdx.x);
  const int64_t t0 = int64_t{blockIdx.y} * group;
  const int n = static_cast<int>(min(int64_t{group}, a.tokens - t0));
  float* ring = reinterpret_cast<float*>(smem4);
  uint8_t* stage = reinterpret_cast<uint8_t*>(smem4) + L.stage_at();
  if (threadIdx.x < kConsumers) {
    ring_consume(a, o, t0, n, L, ring, raw);
  } else {
    ring_produce(a, o, t0, n, L, ring, stage);
  }
}

std::atomic<int64_t> g_ring_launches{0};

// Tokens a ring CTA: as few as fill one wave of (mix + 1)-CTA groups, at most kRingMaxGroup.
int ring_group(const HcLaunch& a) {
  const int64_t per_wave = std::max(1, sm_count() / (a.mix + 1));
  return static_cast<int>(std::clamp<int64_t>((a.tokens + per_wave - 1) / per_wave, 1, kRingMaxGroup));
}

void launch_ring(const HcLaunch& a, float* raw, cudaStream_t stream) {
  const int group = ring_group(a);
  const RingLayout L{group};
  allow_dynamic_smem(hc_ring_kernel, RingLayout{kRingMaxGroup}.bytes());
  const dim3 grid(static_cast<unsigned>(a.mix + 1), static_cast<unsigned>((a.tokens + group - 1) / group));
  launch_kernel(hc_ring_kernel, grid, kThreads, static_cast<size_t>(L.bytes()), stream, a, group, raw);
  g_ring_launches.fetch_add(1);
}

constexpr int kFinishCols = kThreads * 4;  // columns of x per finishing CTA

// CTA (c, t): token t's epilogue from raw (post and comb by the c == 0 CTA), then columns
// [c * kFinishCols, +kFinishCols) of its weighted streams. raw holds `parts` partial rows per token
// (the fast mix's column chunks, [part][token][row]), added in part order; the exact paths give one.
// m[i] = the sum over parts of src[part * stride + i] for i < row (the mix and the square lanes):
// each warp adds every eighth part in order, then warp 0 adds the warps' sums in order (fixed order;
// loads of a warp's parts independent of each other). The whole CTA calls. Loads from L2: the parts
// may be other CTAs' of the same grid (hc_post_pre_kernel).
__device__ void add_parts(const float* src, int64_t stride, int row, int parts, float* m) {
  __shared__ float by_warp[kThreads / kWarp][3 * kWarp + kSqLanes];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  for (int i = lane; i < row; i += kWarp) {
    float v = 0.0f;
    for (int c = warp; c < parts; c += kThreads / kWarp) v += __ldcg(src + c * stride + i);
    by_warp[warp][i] = v;
  }
  __syncthreads();
  if (warp == 0) {
    for (int i = lane; i < row; i += kWarp) {
      float v = by_warp[0][i];
      for (int w = 1; w < kThreads / kWarp; ++w) v += by_warp[w][i];
      m[i] = v;
    }
  }
  __syncwarp();
}

template <bool kPre>
__global__ void __launch_bounds__(kThreads) hc_finish_kernel(HcLaunch a, const float* raw, int parts) {
  pdl_enter();
  __shared__ float m[3 * kWarp + kSqLanes];
  __shared__ float pre[kMaxHc], cm[kMaxHc * kMaxHc];
  const int64_t t = blockIdx.y, row = a.mix + kSqLanes;
  if (parts > 1) add_parts(raw + t * row, a.tokens * row, static_cast<int>(row), parts, m);
  if (threadIdx.x < kWarp) {
    if (parts == 1) {
      for (int64_t i = threadIdx.x; i < row; i += kWarp) m[i] = raw[t * row + i];
    }
    __syncwarp();
    scale_by_rms(a, m);
    mix_outputs<kPre>(a, m, pre, cm, t, blockIdx.x == 0);
  }
  __syncthreads();
  // All of a thread's columns computed before any is stored (x is not known apart from h to the compiler).
  constexpr int kPer = kFinishCols / kThreads;
  const uint16_t* X = a.h + t * a.hc * a.dim;
  const int64_t c0 = int64_t{blockIdx.x} * kFinishCols + threadIdx.x;
  uint16_t v[kPer];
#pragma unroll
  for (int u = 0; u < kPer; ++u)
    if (c0 + u * kThreads < a.dim) v[u] = weighted_column(X, pre, a.hc, a.dim, c0 + u * kThreads);
#pragma unroll
  for (int u = 0; u < kPer; ++u)
    if (c0 + u * kThreads < a.dim) a.x[t * a.dim + c0 + u * kThreads] = v[u];
}

// ---- The finish with the sublayer's RMSNorm (out_norm): a CTA a token ----
// Warp 0 makes the token's pre weights; then the last warp runs post, comb and the Sinkhorn beside the
// others, which weight the streams (kNormPer columns a thread, kept in registers), stage the squares of
// the bf16 row and finish as rms_norm does: warp 0's 8-lane chains, r = 1/sqrt(ss/dim + eps),
// x = bf16(w · (x · r)), each step rounded apart (row_kernels.cu's bits).
constexpr int kNormThreads = kThreads - kWarp;                     // the columns' threads
constexpr int kNormPer = 32;                                       // columns a thread at most
constexpr int64_t kNormMaxDim = int64_t{kNormThreads} * kNormPer;  // 7168 (V4-Pro's dim)
constexpr int kBarColumns = 1;                                     // named barrier of the columns' threads

// Token t's finish, by the whole CTA (kThreads threads); h and the parts read from L2 (hc_post_pre_kernel's
// last CTA reads what the grid's other CTAs wrote). kVec (dim % 8 == 0, h, x and the norm weight 16-byte
// aligned): a thread's columns come in units of eight, one 16-byte load a stream and one store a unit; the
// same per-column arithmetic. kTree (the fast tier: fp32 sums in any fixed order): the sum of squares as
// each thread's columns in order, the warp's butterfly and the warps' sums in order, instead of
// rms_norm's eight 512-long chains (the finish's longest dependent run). The norm weight's lines are
// pulled into L1 as the finish starts: its load after the sum then waits on no DRAM round trip.
template <bool kPre, bool kVec, bool kTree = false>
__device__ void finish_norm_token(const HcLaunch& a, const float* raw, int parts, int64_t t) {
  __shared__ float m[3 * kWarp + kSqLanes];
  __shared__ float pre[kMaxHc], cm[kMaxHc * kMaxHc];
  __shared__ float sq[kTree ? 1 : kNormMaxDim];
  __shared__ float warp_ss[kNormThreads / kWarp];
  __shared__ float r_shared;
  const int64_t row = a.mix + kSqLanes;
  const int warp = threadIdx.x / kWarp;
  for (int64_t i = threadIdx.x * 64; i < a.dim; i += int64_t{kThreads} * 64) {  // a 128-byte line a thread
    asm volatile("prefetch.global.L1 [%0];\n" ::"l"(a.out_norm + i));
  }
  if (parts > 1) add_parts(raw + t * row, a.tokens * row, static_cast<int>(row), parts, m);
  if (warp == 0) {
    if (parts == 1) {
      for (int64_t i = threadIdx.x; i < row; i += kWarp) m[i] = __ldcg(raw + t * row + i);
    }
    __syncwarp();
    scale_by_rms(a, m);
    pre_weights(a, m, pre);
  }
  __syncthreads();
  if (warp == kThreads / kWarp - 1) {
    if constexpr (kPre) post_comb(a, m, cm, t);
    return;  // the columns' threads synchronize among themselves from here
  }
  const uint16_t* X = a.h + t * a.hc * a.dim;
  // Column of x[u]: unit u / 8's eighth column u % 8 (kVec), or the u-th of the thread's stride.
  const auto column = [&](int u) -> int64_t {
    if constexpr (kVec) return (threadIdx.x + int64_t{u / 8} * kNormThreads) * 8 + u % 8;
    return threadIdx.x + int64_t{u} * kNormThreads;
  };
  float x[kNormPer];
  if constexpr (kVec) {
#pragma unroll
    for (int v = 0; v < kNormPer / 8; ++v) {
      const int64_t c0 = column(8 * v);
      if (c0 >= a.dim) {
#pragma unroll
        for (int e = 0; e < 8; ++e) x[8 * v + e] = 0.0f;
        continue;
      }
      float acc[8] = {};
      for (int j = 0; j < a.hc; ++j) {
        const uint4 w = __ldcg(reinterpret_cast<const uint4*>(X + j * a.dim + c0));
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[e] = __fadd_rn(acc[e], __fmul_rn(pre[j], bf16_lane(w, e)));
      }
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        x[8 * v + e] = bf16_to_f(f_to_bf16(acc[e]));
        if constexpr (!kTree) sq[c0 + e] = __fmul_rn(x[8 * v + e], x[8 * v + e]);
      }
    }
  } else {
#pragma unroll
    for (int u = 0; u < kNormPer; ++u) {
      const int64_t c = column(u);
      x[u] = c < a.dim ? bf16_to_f(weighted_column(X, pre, a.hc, a.dim, c)) : 0.0f;
      if (!kTree && c < a.dim) sq[c] = __fmul_rn(x[u], x[u]);
    }
  }
  if constexpr (kTree) {  // columns past dim hold 0
    float ss = 0.0f;
#pragma unroll
    for (int u = 0; u < kNormPer; ++u) ss = __fadd_rn(ss, __fmul_rn(x[u], x[u]));
#pragma unroll
    for (int s = kWarp / 2; s > 0; s /= 2) ss = __fadd_rn(ss, __shfl_xor_sync(0xffffffffu, ss, s));
    if (threadIdx.x % kWarp == 0) warp_ss[warp] = ss;
    bar_sync(kBarColumns, kNormThreads);
    if (threadIdx.x == 0) {
      float total = warp_ss[0];
      for (int w = 1; w < kNormThreads / kWarp; ++w) total = __fadd_rn(total, warp_ss[w]);
      r_shared = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(total, static_cast<float>(a.dim)), a.out_norm_eps)));
    }
  } else {
    bar_sync(kBarColumns, kNormThreads);
    if (threadIdx.x < kWarp) {
      float chain = 0.0f;
      for (int64_t i = threadIdx.x % 8; i < a.dim; i += 8) chain = __fadd_rn(chain, sq[i]);
      publish_rms(chain, static_cast<float>(a.dim), a.out_norm_eps, &r_shared);
    }
  }
  bar_sync(kBarColumns, kNormThreads);
  const float r = r_shared;
  if constexpr (kVec) {
#pragma unroll
    for (int v = 0; v < kNormPer / 8; ++v) {
      const int64_t c0 = column(8 * v);
      if (c0 >= a.dim) continue;
      const uint4 w = *reinterpret_cast<const uint4*>(a.out_norm + c0);
      uint4 out;
      uint32_t* o = &out.x;
#pragma unroll
      for (int e = 0; e < 8; e += 2) {
        const uint16_t lo = f_to_bf16(__fmul_rn(bf16_lane(w, e), __fmul_rn(x[8 * v + e], r)));
        const uint16_t hi = f_to_bf16(__fmul_rn(bf16_lane(w, e + 1), __fmul_rn(x[8 * v + e + 1], r)));
        o[e / 2] = uint32_t{lo} | uint32_t{hi} << 16;
      }
      *reinterpret_cast<uint4*>(a.x + t * a.dim + c0) = out;
    }
  } else {
#pragma unroll
    for (int u = 0; u < kNormPer; ++u) {
      const int64_t c = column(u);
      if (c < a.dim) a.x[t * a.dim + c] = f_to_bf16(__fmul_rn(load_bf16(a.out_norm + c), __fmul_rn(x[u], r)));
    }
  }
}

template <bool kPre, bool kVec>
__global__ void __launch_bounds__(kThreads, 3) hc_finish_norm_kernel(HcLaunch a, const float* raw, int parts) {
  pdl_enter();
  finish_norm_token<kPre, kVec>(a, raw, parts, blockIdx.x);
}

// The output rows' RMSNorm as its own op, where the pass above does not take it.
void norm_rows(const HcLaunch& a, cudaStream_t stream) {
  if (a.out_norm) rms_norm({a.x, a.x, a.out_norm, a.tokens, a.dim, a.out_norm_eps}, stream);
}

template <bool kPre>
void finish(const HcLaunch& a, const float* raw, int parts, bool fused_norm, cudaStream_t stream) {
  if (a.out_norm && a.dim <= kNormMaxDim && fused_norm) {
    const bool vec = a.dim % 8 == 0 && aligned16(a.h) && aligned16(a.x) && aligned16(a.out_norm);
    launch_kernel(vec ? hc_finish_norm_kernel<kPre, true> : hc_finish_norm_kernel<kPre, false>,
                  static_cast<unsigned>(a.tokens), kThreads, 0, stream, a, raw, parts);
    return;
  }
  const dim3 grid(static_cast<unsigned>((a.dim + kFinishCols - 1) / kFinishCols), static_cast<unsigned>(a.tokens));
  launch_kernel(hc_finish_kernel<kPre>, grid, kThreads, 0, stream, a, raw, parts);
  norm_rows(a, stream);
}

// ---- The fast tier's mix (spec/NUMERICS.md: fp32 sums in any fixed order) ----
// A CTA per (chunk of kFastCols columns, group of kT tokens): each thread one column, every mix output's
// product and the sum of squares accumulated in registers, reduced over the warp and the CTA in a fixed
// order into the chunk's partial row; hc_finish adds the chunks in order. A token's sums do not depend
// on kT (kFastTokens; one or two for calls of so few tokens, whose butterflies would be mostly empty).
constexpr int kFastCols = kThreads;
constexpr int kFastTokens = 4;
constexpr int kFastMaxMix = 24;  // hc <= 4
constexpr int64_t kFastMaxTokens = kChainMaxTokens;

template <int kT>
__global__ void __launch_bounds__(kThreads) hc_mix_fast_kernel(HcLaunch a, float* raw) {
  pdl_enter();
  constexpr int kOut = kFastMaxMix + 1;  // the mix outputs, then the sum of squares
  __shared__ float part[kThreads / kWarp][kT * kOut];
  const int64_t width = a.hc * a.dim, col = int64_t{blockIdx.x} * kFastCols + threadIdx.x;
  const int64_t t0 = int64_t{blockIdx.y} * kT, row = a.mix + kSqLanes;
  const int nt = static_cast<int>(min(int64_t{kT}, a.tokens - t0));
  const bool in = col < width;
  float x[kT];
#pragma unroll
  for (int t = 0; t < kT; ++t) x[t] = in && t < nt ? load_bf16(a.h + (t0 + t) * width + col) : 0.0f;
  float acc[kT][kOut];
#pragma unroll
  for (int o = 0; o < kFastMaxMix; ++o) {
    const float w = in && o < a.mix ? __ldg(a.fn + o * width + col) : 0.0f;
#pragma unroll
    for (int t = 0; t < kT; ++t) acc[t][o] = x[t] * w;
  }
#pragma unroll
  for (int t = 0; t < kT; ++t) acc[t][kFastMaxMix] = x[t] * x[t];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
#pragma unroll
  for (int t = 0; t < kT; ++t) {
#pragma unroll
    for (int o = 0; o < kOut; ++o) {
      float v = acc[t][o];
#pragma unroll
      for (int s = kWarp / 2; s > 0; s /= 2) v += __shfl_xor_sync(0xffffffffu, v, s);
      if (lane == 0) part[warp][t * kOut + o] = v;
    }
  }
  __syncthreads();
  float* out = raw + int64_t{blockIdx.x} * a.tokens * row;
  for (int i = threadIdx.x; i < nt * row; i += kThreads) {
    const int t = i / static_cast<int>(row), o = i % static_cast<int>(row);
    const int src = o < a.mix ? o : o == a.mix ? kFastMaxMix : -1;  // lanes past the first sq lane: 0
    float v = 0.0f;
    if (src >= 0) {
      for (int w = 0; w < kThreads / kWarp; ++w) v += part[w][t * kOut + src];
    }
    out[(t0 + t) * row + o] = v;
  }
}

bool fast_mix_applies(int64_t tokens, int mix) { return tokens <= kFastMaxTokens && mix <= kFastMaxMix; }

// ---- The fast tier's mix for many tokens on the bf16 tensor cores ----
// fn's fp32 rows split exactly into three bf16 planes, fn = f1 + f2 + f3 (each rounding leaves a
// remainder of at most 16, then 8 significant bits), so h·fn = Σ_p h·f_p with every product exact in
// fp32 (h is bf16): m16n8k16 MMAs with fp32 accumulation form the sums in their fixed order, and the
// sum of squares runs on the CUDA cores from the same A fragments. The planes are made once a call
// (a few MB, behind the raw parts in scratch). A CTA per (part of kMixChunk columns, kMmaTokens tokens),
// a warp per 16 tokens; h and the planes go through a kMmaStages ring of kMmaStep columns (cp.async, one
// barrier a step). The finish adds the parts in order. The fp32 FMA tiles it replaced took 2.6x as long
// on the mix (docs/perf.md); its sums keep calc_diff ~1e-12 from the exact op (bound 1e-10).
constexpr int64_t kMixChunk = 1024;
constexpr int kMmaWarps = 4;
constexpr int kMmaThreads = kMmaWarps * kWarp;
constexpr int kMmaTokens = 16 * kMmaWarps;
constexpr int kMmaStep = 32;
constexpr int kMmaStages = 3;
// bf16 a staged row: 80 bytes put ldmatrix's eight rows and the B loads' eight rows in distinct banks.
constexpr int kMmaRow = kMmaStep + 8;
constexpr int kPlanes = 3;
constexpr int kPlaneRows = kFastMaxMix;  // mix rows rounded up to 8, at most

struct MixMmaSmem {
  alignas(16) uint16_t h[kMmaStages][kMmaTokens][kMmaRow];
  alignas(16) uint16_t f[kMmaStages][kPlanes * kPlaneRows][kMmaRow];
};

// More tokens than the column-chunk mix takes, whole 16-byte units of h rows (and of the planes, as wide).
bool mma_mix_applies(const HcLaunch& a) {
  return a.tokens > kFastMaxTokens && a.mix <= kFastMaxMix && a.mix + kSqLanes <= kWarp && (a.hc * a.dim) % 8 == 0 &&
         aligned16(a.h);
}
int64_t tile_parts(int64_t width) { return (width + kMixChunk - 1) / kMixChunk; }
int plane_rows(int mix) { return (mix + 7) / 8 * 8; }
// Floats of scratch before the planes: the mix's raw parts, rounded to 16 bytes.
int64_t planes_offset(int64_t tokens, int mix, int64_t width) {
  return (tile_parts(width) * tokens * (mix + kSqLanes) + 3) / 4 * 4;
}
int64_t planes_floats(int mix, int64_t width) { return int64_t{kPlanes} * plane_rows(mix) * width / 2; }

// planes[p][o][c] (o < plane_rows(mix); rows past mix zero): fn[o][c] = Σ_p planes[p][o][c] exactly.
__global__ void hc_fn_planes_kernel(const float* fn, int mix, int rows, int64_t width, uint16_t* planes) {
  pdl_enter();
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= rows * width) return;
  const int64_t o = i / width;
  const float f = o < mix ? fn[i] : 0.0f;
  const float f1 = round_bf16(f), r = f - f1, f2 = round_bf16(r);
  const int64_t plane = rows * width;
  planes[i] = f_to_bf16(f1);
  planes[plane + i] = f_to_bf16(f2);
  planes[2 * plane + i] = f_to_bf16(r - f2);
}

// cp.async of the step of columns [c0, c0 + kMmaStep) into ring slot `slot` (zeros past c_end and the
// last token), planes of kRows rows; a commit even when empty keeps the ring's group count.
template <int kRows>
__device__ void stage_mix_mma(const HcLaunch& a, const uint16_t* planes, int64_t c0, int64_t c_end, int64_t t_base,
                              int slot, MixMmaSmem& sm) {
  const int64_t width = a.hc * a.dim;
  constexpr int kUnits = kMmaStep / 8;  // 16-byte units a row
  for (int i = threadIdx.x; i < kMmaTokens * kUnits; i += kMmaThreads) {
    const int t = i / kUnits, u = i % kUnits;
    const int64_t c = c0 + 8 * u, token = t_base + t;
    const bool in = c < c_end && token < a.tokens;
    cp_async<16>(&sm.h[slot][t][8 * u], a.h + (in ? token * width + c : 0), in ? 16 : 0);
  }
  for (int i = threadIdx.x; i < kPlanes * kRows * kUnits; i += kMmaThreads) {
    const int r = i / kUnits, u = i % kUnits;
    const int64_t c = c0 + 8 * u;
    const bool in = c < c_end;
    cp_async<16>(&sm.f[slot][r][8 * u], planes + (in ? r * width + c : 0), in ? 16 : 0);
  }
  cp_async_commit();
}

__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// kTiles n8 tiles of mix outputs (mix <= 8·kTiles).
template <int kTiles>
__global__ void __launch_bounds__(kMmaThreads) hc_mix_mma_kernel(HcLaunch a, const uint16_t* planes, float* raw) {
  pdl_enter();
  __shared__ MixMmaSmem sm;
  constexpr int kRows = 8 * kTiles;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, t4 = lane % 4;
  const int64_t width = a.hc * a.dim, row = a.mix + kSqLanes;
  const int64_t c_begin = int64_t{blockIdx.x} * kMixChunk, c_end = min(width, c_begin + kMixChunk);
  const int64_t t_base = int64_t{blockIdx.y} * kMmaTokens;
  const int steps = static_cast<int>((c_end - c_begin + kMmaStep - 1) / kMmaStep);
  float acc[kTiles][4] = {};
  float sq[2] = {0.0f, 0.0f};  // rows g and g + 8 of the warp's tokens
#pragma unroll
  for (int s = 0; s < kMmaStages - 1; ++s)
    stage_mix_mma<kRows>(a, planes, c_begin + s * kMmaStep, c_end, t_base, s, sm);
  for (int s = 0; s < steps; ++s) {
    cp_async_wait<kMmaStages - 2>();
    __syncthreads();  // step s landed for every thread; every warp is done with step s - 1's slot
    const int next = s + kMmaStages - 1;
    stage_mix_mma<kRows>(a, planes, c_begin + int64_t{next} * kMmaStep, c_end, t_base, next % kMmaStages, sm);
    const int slot = s % kMmaStages;
#pragma unroll
    for (int kk = 0; kk < kMmaStep / 16; ++kk) {
      uint32_t af[4];
      ldsm_x4(smem_addr(&sm.h[slot][16 * warp + lane % 16][16 * kk + 8 * (lane / 16)]), af);
#pragma unroll
      for (int half = 0; half < 2; ++half) {  // a0, a2: row g; a1, a3: row g + 8
        const uint32_t x = af[half], y = af[half + 2];
        sq[half] = fmaf(bf16_lo(x), bf16_lo(x), sq[half]);
        sq[half] = fmaf(bf16_hi(x), bf16_hi(x), sq[half]);
        sq[half] = fmaf(bf16_lo(y), bf16_lo(y), sq[half]);
        sq[half] = fmaf(bf16_hi(y), bf16_hi(y), sq[half]);
      }
#pragma unroll
      for (int j = 0; j < kTiles; ++j) {
#pragma unroll
        for (int p = 0; p < kPlanes; ++p) {
          const uint32_t b = smem_addr(&sm.f[slot][p * kRows + 8 * j + g][16 * kk + 2 * t4]);
          mma_bf16(acc[j], af, lds_u32(b), lds_u32(b + 16));
        }
      }
    }
  }
  cp_async_wait<0>();  // no copy outlives the CTA (the ring's trailing groups are empty)
  // The partial row of each token: mix sums, the sum of squares in the first square lane, zeros after.
  float* out = raw + int64_t{blockIdx.x} * a.tokens * row;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float v = sq[half];
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    v += __shfl_xor_sync(0xffffffffu, v, 2);
    const int64_t token = t_base + 16 * warp + g + 8 * half;
    if (token >= a.tokens) continue;
    float* o = out + token * row;
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
      const int c = 8 * j + 2 * t4;
      if (c < a.mix) o[c] = acc[j][2 * half];
      if (c + 1 < a.mix) o[c + 1] = acc[j][2 * half + 1];
    }
    o[a.mix + 2 * t4] = t4 == 0 ? v : 0.0f;
    o[a.mix + 2 * t4 + 1] = 0.0f;
  }
}

int64_t fast_chunks(int64_t width) { return (width + kFastCols - 1) / kFastCols; }

template <bool kPre>
void run_fast(const HcLaunch& a, float* scratch, bool fused_norm, cudaStream_t stream) {
  const int64_t width = a.hc * a.dim, chunks = fast_chunks(width);
  const auto grid = [&](int64_t per) {
    return dim3(static_cast<unsigned>(chunks), static_cast<unsigned>((a.tokens + per - 1) / per));
  };
  if (a.tokens == 1) {  // decode's one or two tokens: a CTA's butterflies only for those
    launch_kernel(hc_mix_fast_kernel<1>, grid(1), kThreads, 0, stream, a, scratch);
  } else if (a.tokens == 2) {
    launch_kernel(hc_mix_fast_kernel<2>, grid(2), kThreads, 0, stream, a, scratch);
  } else {
    launch_kernel(hc_mix_fast_kernel<kFastTokens>, grid(kFastTokens), kThreads, 0, stream, a, scratch);
  }
  finish<kPre>(a, scratch, static_cast<int>(chunks), fused_norm, stream);
}

// Tokens per chain CTA so that fn's row and the rows fit in shared memory; 0: the chain path does not apply.
int chain_group(const HcLaunch& a) {
  if (a.tokens > kChainMaxTokens) return 0;
  const int64_t optin = smem_optin();
  const int64_t width = a.hc * a.dim, fn_bytes = (width + 3) / 4 * 16, row_bytes = 2 * (width + kRowPad);
  const int64_t fit = (optin - fn_bytes) / row_bytes;
  return static_cast<int>(std::clamp<int64_t>(fit, 0, std::min<int64_t>(kChainMaxGroup, a.tokens)));
}

template <bool kVec, bool kProducts>
void launch_chain(const HcLaunch& a, int group, float* raw, cudaStream_t stream) {
  const int64_t width = a.hc * a.dim;
  const size_t bytes = static_cast<size_t>((width + 3) / 4 * 16 + 2 * (width + kRowPad) * group);
  // The whole opt-in: chain_group keeps every launch within it.
  allow_dynamic_smem(hc_chain_kernel<kVec, kProducts>, static_cast<size_t>(smem_optin()));
  const dim3 grid(static_cast<unsigned>(a.mix + 1), static_cast<unsigned>((a.tokens + group - 1) / group));
  launch_kernel(hc_chain_kernel<kVec, kProducts>, grid, kThreads, bytes, stream, a, group, raw);
}

void launch_mix_mma(const HcLaunch& a, float* scratch, cudaStream_t stream) {
  const int64_t width = a.hc * a.dim;
  const int rows = plane_rows(a.mix);
  auto* planes = reinterpret_cast<uint16_t*>(scratch + planes_offset(a.tokens, a.mix, width));
  launch_kernel(hc_fn_planes_kernel, static_cast<unsigned>((rows * width + kThreads - 1) / kThreads), kThreads, 0,
                stream, a.fn, a.mix, rows, width, planes);
  const dim3 grid(static_cast<unsigned>(tile_parts(width)),
                  static_cast<unsigned>((a.tokens + kMmaTokens - 1) / kMmaTokens));
  switch (rows / 8) {
    case 1:
      return launch_kernel(hc_mix_mma_kernel<1>, grid, kMmaThreads, 0, stream, a, planes, scratch);
    case 2:
      return launch_kernel(hc_mix_mma_kernel<2>, grid, kMmaThreads, 0, stream, a, planes, scratch);
    default:
      return launch_kernel(hc_mix_mma_kernel<3>, grid, kMmaThreads, 0, stream, a, planes, scratch);
  }
}

template <bool kPre>
void run_mma_mix(const HcLaunch& a, float* scratch, bool fused_norm, cudaStream_t stream) {
  launch_mix_mma(a, scratch, stream);
  finish<kPre>(a, scratch, static_cast<int>(tile_parts(a.hc * a.dim)), fused_norm, stream);
}

template <bool kPre>
void run(const HcLaunch& a, float* scratch, const GemmPolicy& policy, cudaStream_t stream) {
  if (a.tokens == 0) return;
  const bool fast = policy.numerics == Numerics::kFast;
  const bool fused = policy.hc_fused_norm;
  if (fast && scratch && fast_mix_applies(a.tokens, a.mix)) return run_fast<kPre>(a, scratch, fused, stream);
  if (fast && scratch && mma_mix_applies(a)) return run_mma_mix<kPre>(a, scratch, fused, stream);
  const int group = scratch ? chain_group(a) : 0;
  if (group == 0) {
    run_wide<kPre>(a, stream);
    return norm_rows(a, stream);
  }
  const bool vec = (a.hc * a.dim) % 8 == 0 && aligned16(a.fn) && aligned16(a.h);
  // A token a CTA while those CTAs fit one wave: each chain then runs on its products alone (the ring's
  // producers, issuing beside the chain lane, slow it at one token). More tokens share the ring's CTAs.
  if (vec && hc_uses_products(policy, a.tokens, a.mix, a.hc * a.dim)) {
    launch_chain<true, true>(a, 1, scratch, stream);
  } else if (vec && policy.hc_ring) {
    launch_ring(a, scratch, stream);
  } else if (vec) {
    launch_chain<true, false>(a, group, scratch, stream);
  } else {
    launch_chain<false, false>(a, group, scratch, stream);
  }
  finish<kPre>(a, scratch, 1, fused, stream);
}

// One thread per (token, 8 channels) for V4's hc = 4 where rows hold whole 16-byte units: post and comb
// in registers, one 16-byte load per stream and per x, every output computed before any is stored (out
// may alias res). A CTA's threads stay within one token (32-bit index arithmetic). The per-element
// arithmetic is hc_post_kernel's.
constexpr int kPostHc = 4;
constexpr int kPostVec = 8;

__global__ void __launch_bounds__(kThreads)
    hc_post_vec_kernel(const uint16_t* x, const uint16_t* res, const float* post, const float* comb, uint16_t* out,
                       int per_token, int64_t dim) {
  pdl_enter();
  const int64_t t = blockIdx.x / per_token;
  const int64_t c = (int64_t{blockIdx.x % per_token} * kThreads + threadIdx.x) * kPostVec;
  if (c >= dim) return;
  float pw[kPostHc], cm[kPostHc * kPostHc];
#pragma unroll
  for (int k = 0; k < kPostHc; ++k) pw[k] = post[t * kPostHc + k];
#pragma unroll
  for (int e = 0; e < kPostHc * kPostHc; ++e) cm[e] = comb[t * kPostHc * kPostHc + e];
  uint4 r[kPostHc];
#pragma unroll
  for (int j = 0; j < kPostHc; ++j) r[j] = *reinterpret_cast<const uint4*>(res + (t * kPostHc + j) * dim + c);
  const uint4 xv = *reinterpret_cast<const uint4*>(x + t * dim + c);
  uint4 o[kPostHc];
#pragma unroll
  for (int k = 0; k < kPostHc; ++k) {
    uint32_t* w = &o[k].x;
#pragma unroll
    for (int e = 0; e < kPostVec; e += 2) {
      uint32_t pair = 0;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float s = 0;
#pragma unroll
        for (int j = 0; j < kPostHc; ++j) s = __fadd_rn(s, __fmul_rn(cm[j * kPostHc + k], bf16_lane(r[j], e + h)));
        const uint16_t b = f_to_bf16(__fadd_rn(__fmul_rn(pw[k], bf16_lane(xv, e + h)), s));
        pair |= uint32_t{b} << (16 * h);
      }
      w[e / 2] = pair;
    }
  }
#pragma unroll
  for (int k = 0; k < kPostHc; ++k) *reinterpret_cast<uint4*>(out + (t * kPostHc + k) * dim + c) = o[k];
}

// One thread per (token, channel): all hc outputs of that channel (reads precede writes: out may alias).
__global__ void hc_post_kernel(const uint16_t* x, const uint16_t* res, const float* post, const float* comb,
                               uint16_t* out, int64_t tokens, int hc, int64_t dim) {
  pdl_enter();
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= tokens * dim) return;
  const int64_t t = i / dim, c = i % dim;
  float r[kMaxHc];
  for (int j = 0; j < hc; ++j) r[j] = load_bf16(res + (t * hc + j) * dim + c);
  const float xv = load_bf16(x + t * dim + c);
  const float* cm = comb + t * hc * hc;
  for (int k = 0; k < hc; ++k) {
    float s = 0;
    for (int j = 0; j < hc; ++j) s = __fadd_rn(s, __fmul_rn(cm[j * hc + k], r[j]));
    out[(t * hc + k) * dim + c] = f_to_bf16(__fadd_rn(__fmul_rn(post[t * hc + k], xv), s));
  }
}

// ---- hc_post fused with the next sublayer's hc_pre (fast tier, V4's hc 4, a few tokens) ----
// A CTA per (kThreads channels, token), a thread a channel: fn's 24 x 4 weights of its columns loaded before
// the wait on the previous kernel (weights); the post's four new stream values (hc_post_kernel's
// arithmetic; every read before the write, in place); their products with each fn row and their squares
// (fp32, streams in order), summed over the CTA in a fixed order into the token's partial row of this
// chunk. The last CTA of a token to finish (counters[t], set back to 0 by it) adds the rows and runs
// hc_finish_norm's pass: one launch where hc_post, the mix and the finish took three.
constexpr int kFusedMix = (2 + kPostHc) * kPostHc;

__global__ void __launch_bounds__(kThreads, 1)
    hc_post_pre_kernel(HcPostParams p, HcLaunch a, float* raw, int32_t* counters) {
  const int64_t t = blockIdx.y, c = int64_t{blockIdx.x} * kThreads + threadIdx.x, width = kPostHc * a.dim;
  const bool in = c < a.dim;
  // The norm weight of this CTA's channels toward L2 (the finish's last CTA reads all of it).
  if (in && threadIdx.x % 64 == 0) asm volatile("prefetch.global.L2 [%0];\n" ::"l"(a.out_norm + c));
  float w[kPostHc][kFusedMix];
#pragma unroll
  for (int j = 0; j < kPostHc; ++j) {
#pragma unroll
    for (int o = 0; o < kFusedMix; ++o) w[j][o] = in ? __ldg(a.fn + o * width + j * a.dim + c) : 0.0f;
  }
  pdl_enter();
  float hn[kPostHc] = {};
  if (in) {
    float r[kPostHc];
#pragma unroll
    for (int j = 0; j < kPostHc; ++j) r[j] = load_bf16(p.residual + (t * kPostHc + j) * a.dim + c);
    const float xv = load_bf16(p.x + t * a.dim + c);
    const float* cm = p.comb + t * kPostHc * kPostHc;
#pragma unroll
    for (int k = 0; k < kPostHc; ++k) {
      float s = 0;
#pragma unroll
      for (int j = 0; j < kPostHc; ++j) s = __fadd_rn(s, __fmul_rn(cm[j * kPostHc + k], r[j]));
      const uint16_t b = f_to_bf16(__fadd_rn(__fmul_rn(p.post[t * kPostHc + k], xv), s));
      hn[k] = bf16_to_f(b);
      p.out[(t * kPostHc + k) * a.dim + c] = b;
    }
  }
  constexpr int kOut = kFusedMix + 1;  // the mix outputs, then the sum of squares
  float acc[kOut];
#pragma unroll
  for (int o = 0; o < kFusedMix; ++o) {
    float v = 0.0f;
#pragma unroll
    for (int j = 0; j < kPostHc; ++j) v = fmaf(hn[j], w[j][o], v);
    acc[o] = v;
  }
  acc[kFusedMix] = 0.0f;
#pragma unroll
  for (int j = 0; j < kPostHc; ++j) acc[kFusedMix] = fmaf(hn[j], hn[j], acc[kFusedMix]);
  __shared__ float part[kThreads / kWarp][kOut];
  __shared__ bool last;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
#pragma unroll
  for (int o = 0; o < kOut; ++o) {
    float v = acc[o];
#pragma unroll
    for (int s = kWarp / 2; s > 0; s /= 2) v += __shfl_xor_sync(0xffffffffu, v, s);
    if (lane == 0) part[warp][o] = v;
  }
  __syncthreads();
  // The chunk's row: the mix sums, the sum of squares in the first square lane, zeros in the others.
  const int64_t row = a.mix + kSqLanes;
  if (threadIdx.x < row) {
    const int o = static_cast<int>(threadIdx.x), src = o < a.mix ? o : o == a.mix ? kFusedMix : -1;
    float v = 0.0f;
    if (src >= 0) {
      for (int q = 0; q < kThreads / kWarp; ++q) v += part[q][src];
    }
    raw[(int64_t{blockIdx.x} * a.tokens + t) * row + o] = v;
  }
  __threadfence();  // this CTA's streams and row, visible before its count
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(counters + t, 1) == static_cast<int>(gridDim.x) - 1;
    if (last) counters[t] = 0;  // for the next launch (after this grid: stream order)
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  finish_norm_token<true, true, true>(a, raw, static_cast<int>(gridDim.x), t);
}

// The head's parameters as the pre's that the shared kernels read (kPre false: post, comb and the
// Sinkhorn iterations unused; the weighted streams go to y).
HcPreParams head_as_pre(const HcHeadParams& p) {
  return {.h = p.h,
          .tokens = p.tokens,
          .hc = p.hc,
          .dim = p.dim,
          .fn = p.fn,
          .scale = p.scale,
          .base = p.base,
          .norm_eps = p.norm_eps,
          .hc_eps = p.hc_eps,
          .sinkhorn_iters = 0,
          .x = p.y,
          .out_norm = p.out_norm,
          .out_norm_eps = p.out_norm_eps};
}

}  // namespace

int64_t hc_ring_launches() { return g_ring_launches.load(); }
bool hc_uses_products(const GemmPolicy& policy, int64_t tokens, int mix, int64_t width) {
  return policy.hc_products && tokens <= kChainMaxTokens && width % 8 == 0 && tokens * (mix + 1) <= sm_count();
}

int64_t hc_scratch_floats(int64_t tokens, int hc, int64_t dim, int mix, bool fast) {
  if (fast && fast_mix_applies(tokens, mix)) return fast_chunks(hc * dim) * tokens * (mix + kSqLanes);
  if (fast && mix <= kFastMaxMix) return planes_offset(tokens, mix, hc * dim) + planes_floats(mix, hc * dim);
  return tokens <= kChainMaxTokens ? tokens * (mix + kSqLanes) : 0;
}

void hc_pre(const HcPreParams& p, float* scratch, const GemmPolicy& policy, cudaStream_t stream) {
  DSV4_CUDA_REQUIRE(p.hc >= 1 && p.hc <= kMaxHc, "hc_pre: hc must lie in [1, 8]");
  run<true>(HcLaunch{p, (2 + p.hc) * p.hc}, scratch, policy, stream);
}

void hc_post(const HcPostParams& p, cudaStream_t stream) {
  DSV4_CUDA_REQUIRE(p.hc >= 1 && p.hc <= kMaxHc, "hc_post: hc must lie in [1, 8]");
  const int64_t n = p.tokens * p.dim;
  if (n == 0) return;
  const bool vec =
      p.hc == kPostHc && p.dim % kPostVec == 0 && aligned16(p.x) && aligned16(p.residual) && aligned16(p.out);
  const int64_t per_token = (p.dim / kPostVec + kThreads - 1) / kThreads;
  if (vec && p.tokens * per_token <= std::numeric_limits<int32_t>::max()) {
    launch_kernel(hc_post_vec_kernel, static_cast<unsigned>(p.tokens * per_token), kThreads, 0, stream, p.x, p.residual,
                  p.post, p.comb, p.out, static_cast<int>(per_token), p.dim);
    return;
  }
  launch_kernel(hc_post_kernel, static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, stream, p.x,
                p.residual, p.post, p.comb, p.out, p.tokens, p.hc, p.dim);
}

bool hc_post_pre_fuses(const HcPostPreParams& p, const GemmPolicy& policy) {
  const HcPreParams& q = p.pre;
  return policy.numerics == Numerics::kFast && policy.hc_fused_norm && q.tokens >= 1 &&
         q.tokens <= std::min<int64_t>(policy.hc_post_pre_max_tokens, kFastMaxTokens) && q.hc == kPostHc &&
         q.out_norm && q.dim % 8 == 0 && q.dim <= kNormMaxDim && aligned16(q.h) && aligned16(q.x) &&
         aligned16(q.out_norm);
}

void hc_post_pre(const HcPostPreParams& p, float* scratch, int32_t* counters, const GemmPolicy& policy,
                 cudaStream_t stream) {
  if (!scratch || !counters || !hc_post_pre_fuses(p, policy)) {
    hc_post(p.post, stream);
    return hc_pre(p.pre, scratch, policy, stream);
  }
  const HcLaunch a{p.pre, kFusedMix};
  // Its parts (a row per kThreads channels) within the fast mix's scratch (a row per kFastCols columns of
  // the hc streams, kFastCols == kThreads), which hc_post_pre_fuses implies.
  static_assert(kFastCols == kThreads);
  const dim3 grid(static_cast<unsigned>((a.dim + kThreads - 1) / kThreads), static_cast<unsigned>(a.tokens));
  launch_kernel(hc_post_pre_kernel, grid, kThreads, 0, stream, p.post, a, scratch, counters);
}

void hc_head(const HcHeadParams& p, float* scratch, const GemmPolicy& policy, cudaStream_t stream) {
  DSV4_CUDA_REQUIRE(p.hc >= 1 && p.hc <= kMaxHc, "hc_head: hc must lie in [1, 8]");
  run<false>(HcLaunch{head_as_pre(p), p.hc}, scratch, policy, stream);
}

}  // namespace dsv4::cuda
