// The V4 fast path of sparse attention on tensor cores. One shared K=V entry serves every head (MQA),
// so a CTA takes all 64 heads of one token (a group of 64) and stages each 64-entry block of the index
// list once: cp.async copies the next block's entries as stored while the current one is computed,
// then the block is decoded to bf16 in shared memory (e4m3 x 2^k is exact in bf16). 16 warps: warp
// (tile, quarter) owns heads 16·tile.. +16; for S = Q·Kᵀ it takes entries 16·quarter.. +16 and for
// O += P·V output columns 128·quarter.. +128 (mma.sync m16n8k16 bf16, fp32 accumulate). The block's row
// max is exchanged among the tile's four warps in shared memory, P goes through shared memory as bf16.
// Long lists are split over CTAs at 64-block boundaries (flash-decoding); a combine kernel merges the
// partial (m, l, acc). Arithmetic per block as the reference: fp32 scores, block max, l += Σ exp(s − m),
// acc += bf16(p)·v, sink in the denominator; summation order differs (tolerance, not bits).
//
// Many tokens (a prefill) name the same entries many times over (a window entry 128 times), and each CTA
// decoding its own copy cost a fifth of the kernel. There the call first makes a shadow: every distinct
// entry its lists name decoded once into a bf16 row (a slot -> row map per table, claimed by atomics),
// each list element coded once with its row; the CTAs then copy rows (cp.async, the next block's while
// the current one is computed, two buffers where the raw bytes sat) and decode only the entries past the
// shadow's rows. The same bf16 values and the same MMAs in the same order: the same bits as decoding in
// every CTA. The output's inverse RoPE takes the token's (cos, sin) made once a CTA there.
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "backend/cuda/attention.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/gemm/gemm_plan.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/ptx.cuh"

namespace dsv4::cuda {
namespace {

constexpr int kHeads = 64;                            // heads per CTA
constexpr int kTiles = kHeads / 16;                   // MMA row tiles
constexpr int kQuarters = 4;                          // warps per tile
constexpr int kThreads = kTiles * kQuarters * kWarp;  // 512
constexpr int kDim = 512;                             // head_dim of the fast path
constexpr int kRope = 64;                             // rope dims (bf16 in the entry)
constexpr int kNope = kDim - kRope;                   // 448 e4m3 dims
constexpr int kEntries = 64;                          // the reference's index block
constexpr int kRawBytes = kNope + 2 * kRope + 8;      // bytes copied per entry: dims, 7 scales, pad (73 x 8)
constexpr int kRawUnits = kRawBytes / 8;
constexpr int kNopeUnits = kNope / 8;  // decode units of 8 e4m3 dims
constexpr int kRow = 2 * kDim + 16;    // bytes per bf16 row: +16 keeps ldmatrix conflict-free
constexpr int kPRow = 2 * kEntries + 16;
constexpr int kCols = kDim / kQuarters;  // output columns per warp
constexpr int kCombineThreads = kDim / 2;
constexpr int kCombineBatch = 32;  // splits whose partial rows a combine thread loads at once

using Rows = uint8_t[kEntries][kRow];  // a block's entries in bf16 (zero rows for holes)

struct Smem {
  alignas(16) uint8_t q[kHeads][kRow];           // the CTA's queries (zeros past the last head)
  alignas(16) Rows kv;                           // the block's entries
  alignas(16) uint8_t raw[kEntries][kRawBytes];  // the next block's entries as stored
  alignas(16) uint8_t p[kHeads][kPRow];          // bf16(exp(s − m))
  float red[kQuarters][kHeads];                  // each quarter's row maxima; at the end, row sums
  const uint8_t* entry[2][kEntries];             // entries of blocks b, b + 1 by parity (null: none)
  __device__ bool valid(int64_t b, int e) const { return entry[b & 1][e] != nullptr; }
};
static_assert(sizeof(Smem) <= 227 * 1024, "the tile must fit one SM's shared memory");

// The shadowed kernel's: two row buffers instead of one and the raw bytes, and each element's source for
// blocks b, b + 1, b + 2 (by b mod 3): its shadow row, else its stored entry (null: a hole).
struct ShadowSmem {
  alignas(16) uint8_t q[kHeads][kRow];
  alignas(16) Rows kv[2];  // block b in kv[b & 1]
  alignas(16) uint8_t p[kHeads][kPRow];
  float red[kQuarters][kHeads];
  const uint8_t* src[3][kEntries];
  bool shadowed[3][kEntries];
  float2 cs[kRope / 2];
  float2 qcs[kRope / 2];
  __device__ bool valid(int64_t b, int e) const { return src[b % 3][e] != nullptr; }
};
static_assert(sizeof(ShadowSmem) <= 227 * 1024, "the tile must fit one SM's shared memory");

// A call's shadow (device pointers; rows 0: none). Its map from (table, slot) to row is a hash table of
// the step's size, not the tables': keys[h] a slot's key (kNoKey: empty), vals[h] its row (−3: none left),
// linear probing within kShadowProbes; a slot the table could not take is decoded in the kernel.
struct Shadow {
  uint32_t* keys = nullptr;  // [mask + 1]
  int32_t* vals = nullptr;   // [mask + 1]
  uint32_t mask = 0;
  int32_t* claimed = nullptr;  // rows claimed (may pass `rows`)
  int2* named = nullptr;       // [rows]: (table, slot) of each row
  uint8_t* data = nullptr;     // [rows][kDim] bf16
  int32_t* list = nullptr;     // [tokens][window + compressed width]: each element's code (shadow_list_kernel)
  int32_t rows = 0;
};

// The fast path as its kernels get it: the attention and how its index list splits over CTAs.
struct MqaLaunch {
  AttentionLaunch a;
  int groups = 0;             // ceil(heads / kHeads)
  int splits = 1;             // CTAs per (token, group) along the index list
  int blocks_per = 0;         // 64-blocks per split
  int64_t blocks = 0;         // 64-blocks of the list
  float* part_acc = nullptr;  // [splits, tokens, heads, kDim] when splits > 1
  float* part_ml = nullptr;   // [splits, tokens, heads, 2]
  Shadow shadow;
};

__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  return static_cast<uint32_t>(f_to_bf16(lo)) | (static_cast<uint32_t>(f_to_bf16(hi)) << 16);
}

// Token t's rope pair i: (cos, sin) of its angle.
__device__ __forceinline__ float2 token_cos_sin(const AttentionLaunch& a, int64_t t, int i) {
  return rope_cos_sin(static_cast<float>(a.positions[t]) * a.freqs[i]);
}

// Output columns 2c, 2c+1 of token t: bf16, then (positions set, c in the rope part) the inverse RoPE
// of the bf16 pair, as a separate rope() would do it; cs: token t's (cos, sin) made beforehand, or null.
__device__ __forceinline__ uint32_t output_pair(const AttentionLaunch& a, int64_t t, int c, float x, float y,
                                                const float2* cs = nullptr) {
  x = round_bf16(x);
  y = round_bf16(y);
  if (a.positions && 2 * c >= kNope) {
    const int i = (2 * c - kNope) / 2;
    rope_rotate_cs(x, y, cs ? cs[i] : token_cos_sin(a, t, i), true);
  }
  return pack(x, y);
}

// The CTA's token's rope pairs' (cos, sin) into cs (threads 0..kRope/2 − 1; read after a barrier), once
// for its 64 heads.
__device__ __forceinline__ void cta_cos_sin(const AttentionLaunch& a, int64_t t, float2* cs) {
  if (a.positions && threadIdx.x < kRope / 2) cs[threadIdx.x] = token_cos_sin(a, t, static_cast<int>(threadIdx.x));
}

// Slot of list element g of token t (−1: none). A load only: its latency hides behind a block's work.
__device__ __forceinline__ int32_t list_slot(const AttentionLaunch& a, int64_t t, int64_t g) {
  if (g >= int64_t{a.window_width} + a.compressed_width) return -1;
  return g < a.window_width ? a.window_slots[t * a.window_width + g]
                            : a.compressed_slots[t * a.compressed_width + (g - a.window_width)];
}

// The entry of list element g at `slot` (null: none); an unusable slot is reported and treated as none.
__device__ const uint8_t* list_entry(const AttentionLaunch& a, int64_t g, int32_t slot) {
  if (slot < 0) return nullptr;
  const EntryTable& tab = g < a.window_width ? a.window : a.compressed;
  if (!tab.holds(slot)) {
    report(a.err, DeviceError::kAttentionSlot);
    return nullptr;
  }
  return tab.entry(slot);
}

// cp.async of block b's entries as stored into sm.raw (8-byte pieces: entries are 8-byte aligned).
__device__ void load_block(int64_t b, Smem& sm) {
  for (int i = threadIdx.x; i < kEntries * kRawUnits; i += kThreads) {
    const int e = i / kRawUnits, u = i % kRawUnits;
    const uint8_t* src = sm.entry[b & 1][e];
    if (src) cp_async<8>(&sm.raw[e][8 * u], src + 8 * u);
  }
  cp_async_commit();
}

// The 64 query rows of heads h0.. as bf16 (16-byte pieces when q allows, else 4-byte ones), as stored:
// normed, or (the shadow kernel) un-normed (a.q_unnormed; norm_q then normalises them in place). A commit
// group of their own.
template <class S>
__device__ void load_q(const AttentionLaunch& a, int64_t t, int h0, S& sm) {
  const uint16_t* q = a.q_unnormed ? a.q_unnormed : a.q;
  const uint8_t* src = reinterpret_cast<const uint8_t*>(q + (t * a.heads + h0) * kDim);
  const int rows = min(kHeads, a.heads - h0);
  const bool wide = reinterpret_cast<uintptr_t>(q) % 16 == 0;
  constexpr int kPieces = 2 * kDim / 16;  // per row
  for (int i = threadIdx.x; i < kHeads * kPieces; i += kThreads) {
    const int r = i / kPieces, c = 16 * (i % kPieces);
    uint8_t* dst = &sm.q[r][c];
    if (r >= rows) {
      *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
    } else if (wide) {
      cp_async<16>(dst, src + r * 2 * kDim + c);
    } else {
      for (int k = 0; k < 16; k += 4) cp_async<4>(dst + k, src + r * 2 * kDim + c + k);
    }
  }
  cp_async_commit();
  // Un-normed: the token's rope (cos, sin) as head_rms_norm makes them (read after a barrier).
  if constexpr (std::is_same_v<S, ShadowSmem>) {
    if (a.q_unnormed && a.positions && threadIdx.x < kRope / 2) {
      sm.qcs[threadIdx.x] = rope_cos_sin(__fmul_rn(static_cast<float>(a.positions[t]), a.freqs[threadIdx.x]));
    }
  }
}

// Un-normed queries: once the rows load_q copied have landed (their group, the oldest but one in flight,
// waited for here, then a barrier), warp w normalises and ropes heads w, w + 16, w + 32, w + 48 of the
// CTA in shared memory, their chains interleaved, as head_rms_norm would (head_rms_norm_warp: the same
// bits). Readers of sm.q come after the next barrier.
__device__ void norm_q(const AttentionLaunch& a, int h0, ShadowSmem& sm) {
  constexpr int kWarps = kThreads / kWarp, kPerWarp = kHeads / kWarps;
  cp_async_wait<1>();
  __syncthreads();
  const int rows = min(kHeads, a.heads - h0), half = a.positions ? kRope / 2 : 0;
  const int w = static_cast<int>(threadIdx.x / kWarp);
  uint16_t* heads[kPerWarp];
#pragma unroll
  for (int k = 0; k < kPerWarp; ++k) heads[k] = reinterpret_cast<uint16_t*>(sm.q[w + kWarps * k]);
  const int n = rows > w ? (rows - w + kWarps - 1) / kWarps : 0;  // heads w + 16k below rows
  head_rms_norm_warp<kPerWarp>(heads, n, kDim, a.q_norm_eps, half, [&](int i) { return sm.qcs[i]; });
}

// Two e4m3 codes (low byte first) times a power-of-two scale, exactly, as a bf16 pair.
__device__ __forceinline__ uint32_t e4m3x2_bf16x2(uint32_t two, float scale) {
  const __half2 h(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two & 0xffffu), __NV_E4M3));
  const float2 f = __half22float2(h);
  return pack(f.x * scale, f.y * scale);
}

// 16-byte piece u (dims 8u..8u+7) of the bf16 row of a stored entry: u < 56 decodes 8 e4m3 dims with
// their 64-dim block's scale, the others copy 8 rope dims. Loads of 8 bytes (entries are 8-byte aligned).
__device__ __forceinline__ uint4 decode_piece(const uint8_t* entry, int u) {
  if (u < kNopeUnits) {
    const uint2 v = *reinterpret_cast<const uint2*>(entry + 8 * u);
    const float scale = e8_value(entry[kNope + 2 * kRope + u / 8]);
    return make_uint4(e4m3x2_bf16x2(v.x, scale), e4m3x2_bf16x2(v.x >> 16, scale), e4m3x2_bf16x2(v.y, scale),
                      e4m3x2_bf16x2(v.y >> 16, scale));
  }
  const uint2* rope = reinterpret_cast<const uint2*>(entry + kNope + 16 * (u - kNopeUnits));
  const uint2 lo = rope[0], hi = rope[1];
  return make_uint4(lo.x, lo.y, hi.x, hi.y);
}

// sm.raw -> sm.kv for block b, a 16-byte piece a thread (decode_piece on the stored bytes). A hole
// becomes a zero row: its p is 0, but 0·NaN would not be 0.
__device__ void decode_block(int64_t b, Smem& sm) {
  for (int i = threadIdx.x; i < kEntries * 64; i += kThreads) {
    const int e = i / 64, u = i % 64;
    *reinterpret_cast<uint4*>(&sm.kv[e][16 * u]) =
        sm.entry[b & 1][e] ? decode_piece(sm.raw[e], u) : make_uint4(0, 0, 0, 0);
  }
}

// Raw scores of the warp's 16 heads x 16 entries: s[j] is the C fragment of entries 16·quarter + 8j..
// Two accumulator sets over alternating k-steps keep two MMA chains in flight per n-tile.
__device__ void block_scores(const uint8_t (&q)[kHeads][kRow], const Rows& kv, int tile, int quarter,
                             float (&s)[2][4]) {
  const int lane = threadIdx.x % kWarp;
  const uint32_t qa = smem_addr(&q[16 * tile + lane % 16][16 * (lane / 16)]);
  const uint32_t ka = smem_addr(&kv[16 * quarter + lane % 8 + 8 * (lane / 16)][16 * (lane / 8 % 2)]);
  float acc[2][2][4] = {};
#pragma unroll 8
  for (int k = 0; k < kDim / 16; ++k) {
    uint32_t qf[4], kf[4];
    ldsm_x4(qa + 32 * k, qf);
    ldsm_x4(ka + 32 * k, kf);
    mma_bf16(acc[k % 2][0], qf, kf[0], kf[1]);
    mma_bf16(acc[k % 2][1], qf, kf[2], kf[3]);
  }
#pragma unroll
  for (int j = 0; j < 2; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r) s[j][r] = acc[0][j][r] + acc[1][j][r];
}

// O += P·V for the warp's 16 heads x 128 columns: o[j] is the C fragment of columns 128·quarter + 8j..
__device__ void block_pv(const uint8_t (&p)[kHeads][kPRow], const Rows& kv, int tile, int quarter,
                         float (&o)[kCols / 8][4]) {
  const int lane = threadIdx.x % kWarp;
  const uint32_t pa = smem_addr(&p[16 * tile + lane % 16][16 * (lane / 16)]);
  const uint32_t va = smem_addr(&kv[lane % 16][2 * kCols * quarter + 16 * (lane / 16)]);
#pragma unroll
  for (int k = 0; k < kEntries / 16; ++k) {
    uint32_t pf[4];
    ldsm_x4(pa + 32 * k, pf);
#pragma unroll
    for (int n = 0; n < kCols / 16; ++n) {
      uint32_t vf[4];
      ldsm_x4_trans(va + 16 * kRow * k + 32 * n, vf);
      mma_bf16(o[2 * n], pf, vf[0], vf[1]);
      mma_bf16(o[2 * n + 1], pf, vf[2], vf[3]);
    }
  }
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Online-softmax state of the thread's rows g = lane / 4 and g + 8 of its tile (r = 0, 1). Every warp
// of a tile holds the same m; l is the thread's share (its columns) and is summed at the end.
struct RowState {
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.0f, 0.0f};
};

// Scaled scores with −inf at holes, and the warp's row maxima into sm.red.
template <class S>
__device__ void mask_and_max(const AttentionLaunch& a, int64_t b, int tile, int quarter, S& sm, float (&s)[2][4]) {
  const int lane = threadIdx.x % kWarp;
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int j = 0; j < 2; ++j)
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const bool valid = sm.valid(b, 16 * quarter + 8 * j + 2 * (lane % 4) + c);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float& v = s[j][2 * r + c];
        v = valid ? v * a.softmax_scale : -INFINITY;
        mx[r] = fmaxf(mx[r], v);
      }
    }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mx[r] = quad_max(mx[r]);
    if (lane % 4 == 0) sm.red[quarter][16 * tile + lane / 4 + 8 * r] = mx[r];
  }
}

// The block's update given every quarter's maxima: new m, alpha (applied to o), l, and bf16 P into sm.p.
template <class S>
__device__ void softmax_update(int tile, int quarter, S& sm, const float (&s)[2][4], RowState& st,
                               float (&o)[kCols / 8][4]) {
  const int lane = threadIdx.x % kWarp;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = 16 * tile + lane / 4 + 8 * r;
    float m_new = st.m[r];
#pragma unroll
    for (int k = 0; k < kQuarters; ++k) m_new = fmaxf(m_new, sm.red[k][row]);
    float p[2][2] = {}, alpha = 1.0f;  // an all-hole block so far: nothing changes
    if (m_new != -INFINITY) {
      alpha = expf(st.m[r] - m_new);  // 0 for the first block with entries
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int c = 0; c < 2; ++c) p[j][c] = expf(s[j][2 * r + c] - m_new);
    }
    st.m[r] = m_new;
    st.l[r] = st.l[r] * alpha + ((p[0][0] + p[0][1]) + (p[1][0] + p[1][1]));
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int col = 16 * quarter + 8 * j + 2 * (lane % 4);
      *reinterpret_cast<uint32_t*>(&sm.p[row][2 * col]) = pack(p[j][0], p[j][1]);
    }
#pragma unroll
    for (int j = 0; j < kCols / 8; ++j) {
      o[j][2 * r] *= alpha;
      o[j][2 * r + 1] *= alpha;
    }
  }
}

// Sums each row's l over the quad and the tile's four warps (sm.red is free after the last block).
template <class S>
__device__ void total_l(int tile, int quarter, S& sm, RowState& st) {
  const int lane = threadIdx.x % kWarp;
  __syncthreads();
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float l = quad_sum(st.l[r]);
    if (lane % 4 == 0) sm.red[quarter][16 * tile + lane / 4 + 8 * r] = l;
  }
  __syncthreads();
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = 16 * tile + lane / 4 + 8 * r;
    st.l[r] = (sm.red[0][row] + sm.red[1][row]) + (sm.red[2][row] + sm.red[3][row]);
  }
}

// The thread's outputs: normalised bf16 (one split) or the partial state for the combine.
__device__ void store_result(const MqaLaunch& ma, int64_t t, int split, int h0, int quarter, const RowState& st,
                             const float (&o)[kCols / 8][4], const float2* cs) {
  const AttentionLaunch& a = ma.a;
  const int lane = threadIdx.x % kWarp;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int h = h0 + lane / 4 + 8 * r;
    const int64_t th = t * a.heads + h;
    const float m = st.m[r];
    if (ma.splits == 1) {
      uint32_t* out = reinterpret_cast<uint32_t*>(a.out + th * kDim);
      const float denom = m == -INFINITY ? 1.0f : st.l[r] + expf(a.sink[h] - m);
#pragma unroll
      for (int j = 0; j < kCols / 8; ++j) {
        const int c = (kCols * quarter + 8 * j) / 2 + lane % 4;  // column pair
        out[c] = m == -INFINITY ? 0u : output_pair(a, t, c, o[j][2 * r] / denom, o[j][2 * r + 1] / denom, cs);
      }
      continue;
    }
    const int64_t part = int64_t{split} * a.tokens * a.heads + th;
    float2* acc = reinterpret_cast<float2*>(ma.part_acc + part * kDim);
#pragma unroll
    for (int j = 0; j < kCols / 8; ++j)
      acc[(kCols * quarter + 8 * j) / 2 + lane % 4] = make_float2(o[j][2 * r], o[j][2 * r + 1]);
    if (quarter == 0 && lane % 4 == 0) {
      ma.part_ml[part * 2] = m;
      ma.part_ml[part * 2 + 1] = st.l[r];
    }
  }
}

// The CTA's item of a grid of token x group x split, and its blocks [b_begin, b_end) of the list.
struct CtaItem {
  int split, group;
  int64_t t, b_begin, b_end;
};
__device__ __forceinline__ CtaItem cta_item(const MqaLaunch& ma) {
  CtaItem c;
  c.split = static_cast<int>(blockIdx.x % ma.splits);
  c.group = static_cast<int>(blockIdx.x / ma.splits % ma.groups);
  c.t = blockIdx.x / (int64_t{ma.splits} * ma.groups);
  c.b_begin = int64_t{c.split} * ma.blocks_per;
  c.b_end = std::min<int64_t>(ma.blocks, c.b_begin + ma.blocks_per);
  return c;
}

// grid: token x group x split, 512 threads; blocks [split·blocks_per, ..) of the list. Per block:
// decode (raw -> kv) | next block's copy starts; scores and row maxima | softmax, P | P·V.
__global__ void __launch_bounds__(kThreads, 1) mqa_partial_kernel(MqaLaunch ma) {
  pdl_enter();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
  const AttentionLaunch& a = ma.a;
  const CtaItem it = cta_item(ma);
  const int split = it.split, group = it.group;
  const int64_t t = it.t, b_begin = it.b_begin, b_end = it.b_end;
  const int warp = threadIdx.x / kWarp, tile = warp / kQuarters, quarter = warp % kQuarters;
  const int e = threadIdx.x;  // list element e of a block, for the first 64 threads
  int32_t ahead = -1;         // slot of element e of the block after next
  load_q(a, t, group * kHeads, sm);
  if (e < kEntries) {
    sm.entry[b_begin & 1][e] = list_entry(a, b_begin * kEntries + e, list_slot(a, t, b_begin * kEntries + e));
    ahead = list_slot(a, t, (b_begin + 1) * kEntries + e);
  }
  __syncthreads();
  load_block(b_begin, sm);
  float o[kCols / 8][4] = {};
  RowState st;
  for (int64_t b = b_begin; b < b_end; ++b) {
    cp_async_wait_all();
    __syncthreads();  // block b's entries are in sm.raw; the previous block's readers are done
    decode_block(b, sm);
    if (e < kEntries) {
      const int64_t g = (b + 1) * kEntries + e;
      sm.entry[(b + 1) & 1][e] = b + 1 < b_end ? list_entry(a, g, ahead) : nullptr;
      ahead = b + 2 < b_end ? list_slot(a, t, g + kEntries) : -1;
    }
    __syncthreads();  // sm.kv holds block b; sm.raw is free
    if (b + 1 < b_end) load_block(b + 1, sm);
    float s[2][4];
    block_scores(sm.q, sm.kv, tile, quarter, s);
    mask_and_max(a, b, tile, quarter, sm, s);
    __syncthreads();
    softmax_update(tile, quarter, sm, s, st, o);
    __syncthreads();
    block_pv(sm.p, sm.kv, tile, quarter, o);
  }
  total_l(tile, quarter, sm, st);
  const int h0 = group * kHeads + 16 * tile;
  if (h0 < a.heads) store_result(ma, t, split, h0, quarter, st, o, nullptr);
}

// ---- the shadow --------------------------------------------------------------------------------

// f(i, which, slot) for every element i = t·width + g of the call's lists (grid-stride): which 0 for the
// window's, 1 for the compressed list's.
template <class F>
__device__ __forceinline__ void for_each_element(const AttentionLaunch& a, F&& f) {
  const int64_t width = int64_t{a.window_width} + a.compressed_width, n = a.tokens * width;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t g = i % width;
    f(i, g < a.window_width ? 0 : 1, list_slot(a, i / width, g));
  }
}

constexpr uint32_t kNoKey = 0xffffffffu;
constexpr int kShadowProbes = 32;

// A usable slot's key (slots are below 2^31): the table in the top bit.
__device__ __forceinline__ uint32_t shadow_key(int which, int32_t slot) {
  return static_cast<uint32_t>(slot) | (static_cast<uint32_t>(which) << 31);
}
// The key's first bucket (Fibonacci hashing: neighbouring slots land far apart).
__device__ __forceinline__ uint32_t shadow_bucket(uint32_t key, uint32_t mask) {
  const uint32_t h = key * 0x9e3779b1u;
  return (h ^ (h >> 15)) & mask;
}

// A row for each distinct usable slot the lists name, while rows are left: the thread whose compare-and-swap
// puts the key into an empty bucket takes a row number and publishes it (or −3 past the last row). A slot
// named before (most elements of a prefill) is found on the way. Unusable slots are left to
// shadow_list_kernel, which reports them.
__global__ void shadow_claim_kernel(MqaLaunch ma) {
  pdl_enter();
  const Shadow& sh = ma.shadow;
  for_each_element(ma.a, [&](int64_t, int which, int32_t slot) {
    if (!(which ? ma.a.compressed : ma.a.window).holds(slot) || *sh.claimed >= sh.rows) return;
    const uint32_t key = shadow_key(which, slot);
    uint32_t h = shadow_bucket(key, sh.mask);
    for (int probe = 0; probe < kShadowProbes; ++probe, h = (h + 1) & sh.mask) {
      uint32_t k = sh.keys[h];
      if (k == kNoKey) k = atomicCAS(sh.keys + h, kNoKey, key);
      if (k == key) return;       // claimed by another thread
      if (k != kNoKey) continue;  // another slot's bucket
      const int32_t row = atomicAdd(sh.claimed, 1);
      if (row < sh.rows) sh.named[row] = make_int2(which, slot);
      sh.vals[h] = row < sh.rows ? row : -3;
      return;
    }
  });
}

// The row of a usable slot, or −3: none (past the rows, or the table was full along its probes).
__device__ __forceinline__ int32_t shadow_row(const Shadow& sh, int which, int32_t slot) {
  const uint32_t key = shadow_key(which, slot);
  uint32_t h = shadow_bucket(key, sh.mask);
  for (int probe = 0; probe < kShadowProbes; ++probe, h = (h + 1) & sh.mask) {
    const uint32_t k = sh.keys[h];
    if (k == key) return sh.vals[h];
    if (k == kNoKey) return -3;
  }
  return -3;
}

// The claimed rows decoded: a thread a 16-byte piece, four rows a CTA of 256.
constexpr int kShadowThreads = 256;
__global__ void __launch_bounds__(kShadowThreads) shadow_decode_kernel(MqaLaunch ma) {
  pdl_enter();
  const int64_t row = int64_t{blockIdx.x} * (kShadowThreads / 64) + threadIdx.x / 64;
  if (row >= min(*ma.shadow.claimed, ma.shadow.rows)) return;
  const int2 named = ma.shadow.named[row];
  const uint8_t* entry = (named.x ? ma.a.compressed : ma.a.window).entry(named.y);
  reinterpret_cast<uint4*>(ma.shadow.data + row * 2 * kDim)[threadIdx.x % 64] = decode_piece(entry, threadIdx.x % 64);
}

// Each list element's code once the rows are claimed: its shadow row (>= 0), −2 − slot for a slot past
// the shadow's rows, −1 for a hole or an unusable slot (reported here). The CTAs then resolve an element
// with one load, as without a shadow, instead of a slot and then its map entry (a dependent L2 round
// trip a block on the warps that resolve).
__global__ void shadow_list_kernel(MqaLaunch ma) {
  pdl_enter();
  for_each_element(ma.a, [&](int64_t i, int which, int32_t slot) {
    const EntryTable& tab = which ? ma.a.compressed : ma.a.window;
    int32_t code = -1;
    if (slot >= 0 && !tab.holds(slot)) report(ma.a.err, DeviceError::kAttentionSlot);
    if (tab.holds(slot)) {
      const int32_t row = shadow_row(ma.shadow, which, slot);
      code = row >= 0 ? row : -2 - slot;
    }
    ma.shadow.list[i] = code;
  });
}

// Code of list element g of token t (−1 past the list).
__device__ __forceinline__ int32_t shadow_code(const MqaLaunch& ma, int64_t t, int64_t g) {
  const int64_t width = int64_t{ma.a.window_width} + ma.a.compressed_width;
  return g < width ? ma.shadow.list[t * width + g] : -1;
}

// Element g's source from its code: its shadow row, else its stored entry; null for a hole.
__device__ __forceinline__ void resolve(const MqaLaunch& ma, int64_t g, int32_t code, const uint8_t*& src,
                                        bool& shadowed) {
  shadowed = code >= 0;
  if (code >= 0) {
    src = ma.shadow.data + int64_t{code} * 2 * kDim;
  } else {
    src = code == -1 ? nullptr : (g < ma.a.window_width ? ma.a.window : ma.a.compressed).entry(-2 - code);
  }
}

// Block b's rows into sm.kv[b & 1]: a warp copies 512 contiguous bytes of one row (cp.async from the
// shadow; entries past it decoded here; zeros for holes). Committed as one group.
__device__ void fetch_block(int64_t b, ShadowSmem& sm) {
  const int k = static_cast<int>(b % 3);
  Rows& kv = sm.kv[b & 1];
  for (int i = threadIdx.x; i < kEntries * 64; i += kThreads) {
    const int e = i / 64, u = i % 64;
    const uint8_t* src = sm.src[k][e];
    uint8_t* dst = &kv[e][16 * u];
    if (src && sm.shadowed[k][e]) {
      cp_async<16>(dst, src + 16 * u);
    } else {
      *reinterpret_cast<uint4*>(dst) = src ? decode_piece(src, u) : make_uint4(0, 0, 0, 0);
    }
  }
  cp_async_commit();
}

// mqa_partial_kernel on a shadowed call. Per block: (after a barrier) the next block's copies start and
// the block after it is resolved; scores and row maxima | softmax, P | P·V: three barriers, no decode.
__global__ void __launch_bounds__(kThreads, 1) mqa_shadow_kernel(MqaLaunch ma) {
  pdl_enter();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  ShadowSmem& sm = *reinterpret_cast<ShadowSmem*>(smem_raw);
  const AttentionLaunch& a = ma.a;
  const CtaItem it = cta_item(ma);
  const int split = it.split, group = it.group;
  const int64_t t = it.t, b_begin = it.b_begin, b_end = it.b_end;
  const int warp = threadIdx.x / kWarp, tile = warp / kQuarters, quarter = warp % kQuarters;
  const int e = threadIdx.x;  // list element e of a block, for the first 64 threads
  int32_t ahead = -1;         // code of element e of the block after the last one resolved
  load_q(a, t, group * kHeads, sm);
  cta_cos_sin(a, t, sm.cs);
  if (e < kEntries) {
    for (int64_t b = b_begin; b < std::min(b_begin + 2, b_end); ++b) {
      const int64_t g = b * kEntries + e;
      resolve(ma, g, shadow_code(ma, t, g), sm.src[b % 3][e], sm.shadowed[b % 3][e]);
    }
    ahead = b_begin + 2 < b_end ? shadow_code(ma, t, (b_begin + 2) * kEntries + e) : -1;
  }
  __syncthreads();
  fetch_block(b_begin, sm);
  if (a.q_unnormed) norm_q(a, group * kHeads, sm);  // while block b_begin's copies land
  float o[kCols / 8][4] = {};
  RowState st;
  for (int64_t b = b_begin; b < b_end; ++b) {
    cp_async_wait_all();
    // Block b is in kv[b & 1]; block b − 1's readers (of kv[(b + 1) & 1], src) are done. A block of holes
    // alone (a list's unfilled tail) changes nothing (alpha 1, P 0, and P·V adds zeros to accumulators
    // that are never −0): its work is skipped, the same bits.
    const bool entries = __syncthreads_or(e < kEntries && sm.src[b % 3][e] != nullptr);
    if (b + 1 < b_end) fetch_block(b + 1, sm);
    if (e < kEntries && b + 2 < b_end) {
      const int64_t g = (b + 2) * kEntries + e;
      resolve(ma, g, ahead, sm.src[(b + 2) % 3][e], sm.shadowed[(b + 2) % 3][e]);
      ahead = b + 3 < b_end ? shadow_code(ma, t, g + kEntries) : -1;
    }
    if (!entries) continue;
    float s[2][4];
    block_scores(sm.q, sm.kv[b & 1], tile, quarter, s);
    mask_and_max(a, b, tile, quarter, sm, s);
    __syncthreads();
    softmax_update(tile, quarter, sm, s, st, o);
    __syncthreads();
    block_pv(sm.p, sm.kv[b & 1], tile, quarter, o);
  }
  total_l(tile, quarter, sm, st);
  const int h0 = group * kHeads + 16 * tile;
  if (h0 < a.heads) store_result(ma, t, split, h0, quarter, st, o, sm.cs);
}

// One CTA per (token, head): merges the splits' (m, l, acc) and applies the sink. The splits' m and l
// come to shared memory first, read by the whole CTA at once, and each split's weight exp(m_s − m) is
// made there; the merge then adds the splits in order (as one thread would), each batch of kCombineBatch
// splits' loads issued together before its adds, so a long list's many splits (130 at 1M tokens' HCA)
// cost a few round trips to memory, not one each (a loop unrolled by 8 left ~17 at 1M).
__global__ void __launch_bounds__(kCombineThreads) mqa_combine_kernel(MqaLaunch ma) {
  pdl_enter();
  extern __shared__ float2 split_ml[];  // [splits]: (m_s, l_s), then (weight or −1 for an empty split, l_s)
  __shared__ float warp_max[kCombineThreads / kWarp];
  const AttentionLaunch& a = ma.a;
  const int64_t th = blockIdx.x;  // token * heads + head
  const int h = static_cast<int>(th % a.heads);
  const int64_t stride = a.tokens * a.heads;
  float m = -INFINITY;
  for (int s = threadIdx.x; s < ma.splits; s += kCombineThreads) {
    split_ml[s] = reinterpret_cast<const float2*>(ma.part_ml)[s * stride + th];
    m = fmaxf(m, split_ml[s].x);
  }
  for (int o = kWarp / 2; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (threadIdx.x % kWarp == 0) warp_max[threadIdx.x / kWarp] = m;
  __syncthreads();
  for (int w = 0; w < kCombineThreads / kWarp; ++w) m = fmaxf(m, warp_max[w]);
  uint32_t* out = reinterpret_cast<uint32_t*>(a.out + th * kDim);
  const int c = threadIdx.x;
  if (m == -INFINITY) {
    out[c] = 0;
    return;
  }
  for (int s = threadIdx.x; s < ma.splits; s += kCombineThreads) {
    const float ms = split_ml[s].x;
    split_ml[s].x = ms == -INFINITY ? -1.0f : expf(ms - m);
  }
  __syncthreads();
  float l = 0, x = 0, y = 0;
  for (int s0 = 0; s0 < ma.splits; s0 += kCombineBatch) {
    float2 v[kCombineBatch];  // every load of the batch issued before the first add
#pragma unroll
    for (int i = 0; i < kCombineBatch; ++i) {
      if (s0 + i < ma.splits) v[i] = reinterpret_cast<const float2*>(ma.part_acc + ((s0 + i) * stride + th) * kDim)[c];
    }
#pragma unroll
    for (int i = 0; i < kCombineBatch; ++i) {
      if (s0 + i >= ma.splits) break;
      const float2 ml = split_ml[s0 + i];
      if (ml.x < 0.0f) continue;  // no entry in this split
      l += ml.y * ml.x;
      x += v[i].x * ml.x;
      y += v[i].y * ml.x;
    }
  }
  const float denom = l + expf(a.sink[h] - m);
  out[c] = output_pair(a, th / a.heads, c, x / denom, y / denom);
}

// Buckets of the shadow's hash table: at least four a row (a quarter full when every row is claimed).
uint32_t shadow_buckets(int64_t rows) {
  uint32_t n = 1024;
  while (n < 4 * rows) n *= 2;
  return n;
}

// Bytes of a shadow of `rows` rows over lists of `elements` elements (table and count, names, rows, codes),
// and the shadow laid out in them.
constexpr size_t up256(int64_t b) { return static_cast<size_t>((b + 255) / 256 * 256); }
size_t shadow_bytes(int64_t rows, int64_t elements) {
  return up256(8 * int64_t{shadow_buckets(rows)} + 4) + up256(8 * rows) + up256(2 * kDim * rows) + up256(4 * elements);
}
Shadow shadow_at(void* p, int64_t rows) {
  const uint32_t buckets = shadow_buckets(rows);
  Shadow sh;
  sh.rows = static_cast<int32_t>(rows);
  sh.mask = buckets - 1;
  sh.keys = static_cast<uint32_t*>(p);
  sh.vals = reinterpret_cast<int32_t*>(sh.keys + buckets);
  sh.claimed = sh.vals + buckets;
  uint8_t* at = static_cast<uint8_t*>(p) + up256(8 * int64_t{buckets} + 4);
  sh.named = reinterpret_cast<int2*>(at);
  sh.data = at + up256(8 * rows);
  sh.list = reinterpret_cast<int32_t*>(sh.data + up256(2 * kDim * rows));
  return sh;
}

// The shadow's table cleared, its rows claimed, the lists coded and the rows decoded (the kernel after
// reads them); its scratch in *scratch (freed by the caller after that kernel).
void make_shadow(MqaLaunch& ma, int64_t want_rows, void** scratch, cudaStream_t stream) {
  const AttentionLaunch& a = ma.a;
  const int64_t width = int64_t{a.window_width} + a.compressed_width;
  const int64_t cap_w = a.window.capacity, cap_c = a.compressed_width > 0 ? a.compressed.capacity : 0;
  const int64_t rows = std::min({want_rows, a.tokens * width, cap_w + cap_c});
  DSV4_CUDA_CHECK(cudaMallocAsync(scratch, shadow_bytes(rows, a.tokens * width), stream));
  ma.shadow = shadow_at(*scratch, rows);
  // The keys empty (all ones) and the count zero, the values left as they are (written with their key).
  DSV4_CUDA_CHECK(cudaMemsetAsync(ma.shadow.keys, 0xff, 4 * (size_t{ma.shadow.mask} + 1), stream));
  DSV4_CUDA_CHECK(cudaMemsetAsync(ma.shadow.claimed, 0, 4, stream));
  const int64_t list_ctas =
      std::max<int64_t>(1, std::min<int64_t>((a.tokens * width + 255) / 256, 8 * int64_t{sm_count()}));
  launch_kernel(shadow_claim_kernel, static_cast<unsigned>(list_ctas), 256, 0, stream, ma);
  launch_kernel(shadow_list_kernel, static_cast<unsigned>(list_ctas), 256, 0, stream, ma);
  const int64_t decode_ctas = (rows + kShadowThreads / 64 - 1) / (kShadowThreads / 64);
  if (decode_ctas > 0)
    launch_kernel(shadow_decode_kernel, static_cast<unsigned>(decode_ctas), kShadowThreads, 0, stream, ma);
}

}  // namespace

bool mqa_fast_path(const SparseAttentionParams& a) {
  const bool fp8_window = a.window.format == KvEntryFormat::kAttnFp8;
  const bool fp8_compressed = a.compressed_width == 0 || a.compressed.format == KvEntryFormat::kAttnFp8;
  return a.head_dim == kDim && a.rope_dim == kRope && a.heads % 16 == 0 && fp8_window && fp8_compressed &&
         a.window.entry_bytes % 8 == 0 && (a.compressed_width == 0 || a.compressed.entry_bytes % 8 == 0);
}

void sparse_attention_mqa(const AttentionLaunch& a, cudaStream_t stream, int64_t shadow_rows) {
  DSV4_CUDA_REQUIRE(!a.q_unnormed || shadow_rows > 0, "sparse_attention_mqa: un-normed queries need a shadow");
  MqaLaunch ma;
  ma.a = a;
  ma.groups = (a.heads + kHeads - 1) / kHeads;
  const int64_t width = int64_t{a.window_width} + a.compressed_width;
  ma.blocks = std::max<int64_t>(1, (width + kEntries - 1) / kEntries);
  const int64_t base = a.tokens * ma.groups;
  ma.blocks_per = attention_blocks_per_split(base, ma.blocks, sm_count());
  ma.splits = static_cast<int>((ma.blocks + ma.blocks_per - 1) / ma.blocks_per);  // never an empty split
  void* scratch = nullptr;
  if (ma.splits > 1) {
    const size_t n = static_cast<size_t>(ma.splits) * static_cast<size_t>(a.tokens * a.heads);
    DSV4_CUDA_CHECK(cudaMallocAsync(&scratch, n * (kDim + 2) * sizeof(float), stream));
    ma.part_acc = static_cast<float*>(scratch);
    ma.part_ml = ma.part_acc + n * kDim;
  }
  const unsigned ctas = static_cast<unsigned>(base * ma.splits);
  if (shadow_rows > 0) {  // the tiles need more than the default 48 KB
    void* shadow = nullptr;
    make_shadow(ma, shadow_rows, &shadow, stream);
    allow_dynamic_smem(mqa_shadow_kernel, sizeof(ShadowSmem));
    launch_kernel(mqa_shadow_kernel, ctas, kThreads, sizeof(ShadowSmem), stream, ma);
    DSV4_CUDA_CHECK(cudaFreeAsync(shadow, stream));
  } else {
    allow_dynamic_smem(mqa_partial_kernel, sizeof(Smem));
    launch_kernel(mqa_partial_kernel, ctas, kThreads, sizeof(Smem), stream, ma);
  }
  if (ma.splits > 1) {
    const size_t smem = sizeof(float2) * static_cast<size_t>(ma.splits);
    DSV4_CUDA_REQUIRE(smem <= 48 * 1024, "sparse_attention: " + std::to_string(ma.splits) + " splits of one list");
    launch_kernel(mqa_combine_kernel, static_cast<unsigned>(a.tokens * a.heads), kCombineThreads, smem, stream, ma);
    DSV4_CUDA_CHECK(cudaFreeAsync(scratch, stream));
  }
}

}  // namespace dsv4::cuda
