// The V4 fast path of sparse attention: one shared K=V entry serves every head (MQA), so a CTA
// takes 16 heads of one token and stages each 64-entry block of its index list once in shared
// memory (FP8 entries decoded to bf16, which holds e4m3 x 2^k exactly), then computes the 16 x 64
// scores, the online-softmax update per head, and P·V from the same tile. Long lists are split over
// CTAs at 64-block boundaries (flash-decoding); a combine kernel merges the partial (m, l, acc).
// Arithmetic per block as the reference: fp32 scores, block max, l += Σ exp(s − m), acc += bf16(p)·v,
// sink in the denominator; summation order differs from the generic kernel (tolerance, not bits).
#include <algorithm>

#include "backend/cuda/attention.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_math.cuh"

namespace dsv4::cuda {
namespace {

constexpr int kHeads = 16;               // heads per CTA
constexpr int kDim = 512;                // head_dim of the fast path
constexpr int kRope = 64;                // rope dims (bf16 in the entry)
constexpr int kNope = kDim - kRope;      // 448 e4m3 dims
constexpr int kEntries = 64;             // the reference's index block
constexpr int kThreads = 256;            // 8 warps
constexpr int kRowWords = kDim / 2 + 1;  // bf16 pairs per staged row, +1 word: conflict-free columns

struct Smem {
  uint32_t ent[kEntries][kRowWords];  // staged entries, bf16 pairs
  uint32_t q[kHeads][kDim / 2];       // the CTA's queries, bf16 pairs
  float s[kHeads][kEntries];          // scores
  float p[kEntries][kHeads];          // bf16(exp(s − m)), entry-major for P·V
  float m[kHeads], l[kHeads], alpha[kHeads];
  int valid[kEntries];
};

struct MqaArgs {
  AttentionArgs a;
  int groups = 0;             // heads / kHeads
  int splits = 1;             // CTAs per (token, group) along the index list
  int blocks_per = 0;         // 64-blocks per split
  float* part_acc = nullptr;  // [splits, tokens, heads, kDim] when splits > 1
  float* part_ml = nullptr;   // [splits, tokens, heads, 2]
};

__device__ __forceinline__ float2 unpack(uint32_t w) {
  return make_float2(bf16_to_f(static_cast<uint16_t>(w & 0xffffu)), bf16_to_f(static_cast<uint16_t>(w >> 16)));
}
__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  return static_cast<uint32_t>(f_to_bf16(lo)) | (static_cast<uint32_t>(f_to_bf16(hi)) << 16);
}

// Output columns 2c, 2c+1 of token t: bf16, then (positions set, c in the rope part) the inverse RoPE
// of the bf16 pair, as a separate rope() would do it.
__device__ __forceinline__ uint32_t output_pair(const AttentionArgs& a, int64_t t, int c, float x, float y) {
  x = round_bf16(x);
  y = round_bf16(y);
  if (a.positions && 2 * c >= kNope) {
    rope_rotate(x, y, static_cast<float>(a.positions[t]) * a.freqs[(2 * c - kNope) / 2], true);
  }
  return pack(x, y);
}

// Slot of list element g of token t (−1: none); an unusable slot is reported and treated as none.
__device__ int32_t list_slot(const AttentionArgs& a, int64_t t, int64_t g) {
  const bool w = g < a.window_width;
  const int32_t slot =
      w ? a.window_slots[t * a.window_width + g] : a.compressed_slots[t * a.compressed_width + (g - a.window_width)];
  if (slot < 0) return -1;
  if (!(w ? a.window : a.compressed).holds(slot)) {
    report(a.err, DeviceError::kAttentionSlot);
    return -1;
  }
  return slot;
}

// Warp `warp` stages entries warp, warp + 8, ... of block b: lanes 0-27 decode 16 FP8 dims each
// (8-byte loads: entries are 8-byte aligned), lanes 28-31 copy 16 rope dims each.
__device__ void stage_block(const AttentionArgs& a, int64_t t, int64_t b, Smem& sm) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t width = int64_t{a.window_width} + a.compressed_width;
  for (int i = warp; i < kEntries; i += kThreads / kWarp) {
    const int64_t g = b * kEntries + i;
    const int32_t slot = g < width ? list_slot(a, t, g) : -1;
    uint32_t* row = sm.ent[i];
    if (lane == 0) sm.valid[i] = slot >= 0;
    if (slot < 0) {
      for (int w = lane; w < kDim / 2; w += kWarp) row[w] = 0;  // p = 0 there, but 0·NaN would not be 0
      continue;
    }
    const DeviceTable& tab = g < a.window_width ? a.window : a.compressed;
    const uint8_t* e = tab.entry(slot);
    if (lane < kNope / 16) {
      const float scale = e8_value(e[kNope + 2 * kRope + lane / 4]);
      for (int half = 0; half < 2; ++half) {
        const uint2 v = *reinterpret_cast<const uint2*>(e + 16 * lane + 8 * half);
        const uint32_t words[2] = {v.x, v.y};
        for (int w = 0; w < 2; ++w)
          for (int j = 0; j < 4; j += 2) {
            const float lo = e4m3_to_f(static_cast<uint8_t>(words[w] >> (8 * j))) * scale;
            const float hi = e4m3_to_f(static_cast<uint8_t>(words[w] >> (8 * j + 8))) * scale;
            row[(16 * lane + 8 * half + 4 * w + j) / 2] = pack(lo, hi);
          }
      }
    } else {
      const int r = lane - kNope / 16;  // 0..3: rope dims [16r, 16r + 16)
      for (int c = 0; c < 4; ++c) {
        const uint2 v = *reinterpret_cast<const uint2*>(e + kNope + 32 * r + 8 * c);
        row[(kNope + 16 * r + 4 * c) / 2] = v.x;
        row[(kNope + 16 * r + 4 * c) / 2 + 1] = v.y;
      }
    }
  }
}

// S[h][i] for the 16 x 64 tile: warp w takes heads 2w, 2w+1, lane j entries j and j + 32.
__device__ void scores(const AttentionArgs& a, Smem& sm) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int h0 = 2 * warp, i0 = lane, i1 = lane + 32;
  float s00 = 0, s01 = 0, s10 = 0, s11 = 0;
#pragma unroll 4
  for (int w = 0; w < kDim / 2; ++w) {
    const float2 qa = unpack(sm.q[h0][w]), qb = unpack(sm.q[h0 + 1][w]);
    const float2 e0 = unpack(sm.ent[i0][w]), e1 = unpack(sm.ent[i1][w]);
    s00 += qa.x * e0.x + qa.y * e0.y;
    s01 += qa.x * e1.x + qa.y * e1.y;
    s10 += qb.x * e0.x + qb.y * e0.y;
    s11 += qb.x * e1.x + qb.y * e1.y;
  }
  sm.s[h0][i0] = sm.valid[i0] ? s00 * a.softmax_scale : -INFINITY;
  sm.s[h0][i1] = sm.valid[i1] ? s01 * a.softmax_scale : -INFINITY;
  sm.s[h0 + 1][i0] = sm.valid[i0] ? s10 * a.softmax_scale : -INFINITY;
  sm.s[h0 + 1][i1] = sm.valid[i1] ? s11 * a.softmax_scale : -INFINITY;
}

// The online-softmax update of heads 2w, 2w+1 by warp w: new max, alpha, l, and bf16 P.
__device__ void softmax_update(Smem& sm) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  for (int h = 2 * warp; h < 2 * warp + 2; ++h) {
    const float v0 = sm.s[h][lane], v1 = sm.s[h][lane + 32];
    const float m_old = sm.m[h];
    const float m_new = fmaxf(m_old, warp_max(fmaxf(v0, v1)));
    float p0 = 0, p1 = 0, alpha = 1;
    if (m_new != -INFINITY) {
      alpha = m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
      p0 = v0 == -INFINITY ? 0.0f : expf(v0 - m_new);
      p1 = v1 == -INFINITY ? 0.0f : expf(v1 - m_new);
    }
    const float sum = warp_sum(p0 + p1);
    sm.p[lane][h] = round_bf16(p0);
    sm.p[lane + 32][h] = round_bf16(p1);
    if (lane == 0) {
      sm.l[h] = sm.l[h] * alpha + sum;
      sm.alpha[h] = alpha;
      sm.m[h] = m_new;
    }
  }
}

// grid: token x group x split; block 256: thread c owns columns 2c, 2c+1 of all 16 heads.
__global__ void __launch_bounds__(kThreads) mqa_partial_kernel(MqaArgs ma) {
  extern __shared__ __align__(16) unsigned char raw[];
  Smem& sm = *reinterpret_cast<Smem*>(raw);
  const AttentionArgs& a = ma.a;
  const int64_t cta = blockIdx.x;
  const int split = static_cast<int>(cta % ma.splits);
  const int group = static_cast<int>((cta / ma.splits) % ma.groups);
  const int64_t t = cta / (int64_t{ma.splits} * ma.groups);
  const int c = threadIdx.x;
  const uint32_t* qsrc = reinterpret_cast<const uint32_t*>(a.q + (t * a.heads + int64_t{group} * kHeads) * kDim);
  for (int i = threadIdx.x; i < kHeads * kDim / 2; i += kThreads) sm.q[i / (kDim / 2)][i % (kDim / 2)] = qsrc[i];
  if (threadIdx.x < kHeads) {
    sm.m[threadIdx.x] = -INFINITY;
    sm.l[threadIdx.x] = 0;
  }
  float acc[kHeads][2] = {};
  const int64_t width = int64_t{a.window_width} + a.compressed_width;
  const int64_t blocks = (width + kEntries - 1) / kEntries;
  const int64_t b_end = std::min<int64_t>(blocks, int64_t{split + 1} * ma.blocks_per);
  for (int64_t b = int64_t{split} * ma.blocks_per; b < b_end; ++b) {
    __syncthreads();  // the previous block's tile is consumed
    stage_block(a, t, b, sm);
    __syncthreads();
    scores(a, sm);
    __syncthreads();
    softmax_update(sm);
    __syncthreads();
#pragma unroll
    for (int h = 0; h < kHeads; ++h) {
      acc[h][0] *= sm.alpha[h];
      acc[h][1] *= sm.alpha[h];
    }
    for (int i = 0; i < kEntries; ++i) {
      if (!sm.valid[i]) continue;
      const float2 e = unpack(sm.ent[i][c]);
#pragma unroll
      for (int h = 0; h < kHeads; ++h) {
        const float p = sm.p[i][h];
        acc[h][0] += p * e.x;
        acc[h][1] += p * e.y;
      }
    }
  }
  __syncthreads();
  const int64_t head0 = t * a.heads + int64_t{group} * kHeads;
  if (ma.splits == 1) {
    for (int h = 0; h < kHeads; ++h) {
      const float m = sm.m[h];
      uint32_t* out = reinterpret_cast<uint32_t*>(a.out + (head0 + h) * kDim);
      if (m == -INFINITY) {
        out[c] = 0;
        continue;
      }
      const float denom = sm.l[h] + expf(a.sink[group * kHeads + h] - m);
      out[c] = output_pair(a, t, c, acc[h][0] / denom, acc[h][1] / denom);
    }
    return;
  }
  const int64_t part = (int64_t{split} * a.tokens * a.heads + head0);
  for (int h = 0; h < kHeads; ++h) {
    reinterpret_cast<float2*>(ma.part_acc + (part + h) * kDim)[c] = make_float2(acc[h][0], acc[h][1]);
    if (c == 0) {
      ma.part_ml[(part + h) * 2] = sm.m[h];
      ma.part_ml[(part + h) * 2 + 1] = sm.l[h];
    }
  }
}

// One CTA per (token, head): merges the splits' (m, l, acc) and applies the sink.
__global__ void __launch_bounds__(kThreads) mqa_combine_kernel(MqaArgs ma) {
  const AttentionArgs& a = ma.a;
  const int64_t th = blockIdx.x;  // token * heads + head
  const int h = static_cast<int>(th % a.heads);
  const int64_t stride = a.tokens * a.heads;
  float m = -INFINITY;
  for (int s = 0; s < ma.splits; ++s) m = fmaxf(m, ma.part_ml[(s * stride + th) * 2]);
  uint32_t* out = reinterpret_cast<uint32_t*>(a.out + th * kDim);
  const int c = threadIdx.x;
  if (m == -INFINITY) {
    out[c] = 0;
    return;
  }
  float l = 0, x = 0, y = 0;
  for (int s = 0; s < ma.splits; ++s) {
    const float ms = ma.part_ml[(s * stride + th) * 2];
    if (ms == -INFINITY) continue;
    const float w = expf(ms - m);
    l += ma.part_ml[(s * stride + th) * 2 + 1] * w;
    const float2 v = reinterpret_cast<const float2*>(ma.part_acc + (s * stride + th) * kDim)[c];
    x += v.x * w;
    y += v.y * w;
  }
  const float denom = l + expf(a.sink[h] - m);
  out[c] = output_pair(a, th / a.heads, c, x / denom, y / denom);
}

}  // namespace

bool mqa_fast_path(const AttentionArgs& a) {
  const bool fp8_window = a.window.format == EntryFormat::kAttnFp8;
  const bool fp8_compressed = a.compressed_width == 0 || a.compressed.format == EntryFormat::kAttnFp8;
  return a.head_dim == kDim && a.rope_dim == kRope && a.heads % kHeads == 0 && fp8_window && fp8_compressed &&
         a.window.entry_bytes % 8 == 0 && (a.compressed_width == 0 || a.compressed.entry_bytes % 8 == 0);
}

void sparse_attention_mqa(const AttentionArgs& a, cudaStream_t stream) {
  MqaArgs ma;
  ma.a = a;
  ma.groups = a.heads / kHeads;
  const int64_t width = int64_t{a.window_width} + a.compressed_width;
  const int64_t blocks = std::max<int64_t>(1, (width + kEntries - 1) / kEntries);
  // Enough CTAs for two waves on 132 SMs; never an empty split.
  const int64_t base = a.tokens * ma.groups;
  const int64_t want = std::clamp<int64_t>((264 + base - 1) / base, 1, blocks);
  ma.blocks_per = static_cast<int>((blocks + want - 1) / want);
  ma.splits = static_cast<int>((blocks + ma.blocks_per - 1) / ma.blocks_per);
  void* scratch = nullptr;
  if (ma.splits > 1) {
    const size_t n = static_cast<size_t>(ma.splits) * static_cast<size_t>(a.tokens * a.heads);
    DSV4_CUDA_CHECK(cudaMallocAsync(&scratch, n * (kDim + 2) * sizeof(float), stream));
    ma.part_acc = static_cast<float*>(scratch);
    ma.part_ml = ma.part_acc + n * kDim;
  }
  static bool configured = false;  // the tile needs more than the default 48 KB of shared memory
  if (!configured) {
    DSV4_CUDA_CHECK(cudaFuncSetAttribute(mqa_partial_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(sizeof(Smem))));
    configured = true;
  }
  mqa_partial_kernel<<<static_cast<unsigned>(base * ma.splits), kThreads, sizeof(Smem), stream>>>(ma);
  DSV4_CUDA_CHECK_LAUNCH();
  if (ma.splits > 1) {
    mqa_combine_kernel<<<static_cast<unsigned>(a.tokens * a.heads), kThreads, 0, stream>>>(ma);
    DSV4_CUDA_CHECK_LAUNCH();
    DSV4_CUDA_CHECK(cudaFreeAsync(scratch, stream));
  }
}

}  // namespace dsv4::cuda
