#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <memory>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/gemm/fast_divide.h"
#include "backend/cuda/gemm/mma_layout.h"
#include "backend/cuda/indexer.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/ptx.cuh"

namespace dsv4::cuda {
namespace {

constexpr int kDim = 128;  // index_head_dim
constexpr int kMaxHeads = 256;
constexpr int kMaxTopk = 2048;
constexpr int64_t kScratchBudget = int64_t{1} << 28;  // scratch bytes per token group (256 MiB)

// Scoring: a CTA scores tiles of 64 keys against every head, 64 heads a pass. Lane l of warp w computes
// the 16 dots of keys 32(w % 2) + l % 8 + 8r and heads 16(w / 2) + l / 8 + 4c (r, c < 4) of a pass.
// Shared memory delivers 128 B a clock to registers, broadcast or not, against 128 fmas: q stays bf16
// there (exact; 2 B per value, widened in registers) and keys fp32 (fp8 keys are not bf16-exact).
constexpr int kScoreThreads = 256;
constexpr int kTileKeys = 64;
constexpr int kPassHeads = 64;
constexpr int kRowFloats = kDim + 4;  // a shared key row: the 8 rows a warp reads at once hit distinct banks
constexpr int kQRow = kDim + 8;       // a shared bf16 q row: the 4 rows a warp reads at once hit distinct banks
constexpr int kTermRow = kPassHeads + 1;

// Selection: a radix cut on 16-bit score keys, then a compaction over chunks of the row, one CTA each.
constexpr int kBins = 256;
constexpr int kWideBins = 65536;     // a wide histogram counts every 16-bit score key,
constexpr int64_t kWideTokens = 64;  // for token groups this small
constexpr int64_t kWideRow = 32768;  // with rows this long
// A token's wide histogram in up to this many copies, CTA c counting into copy c % copies: the atomics of a
// token's CTAs (every CTA of the grid at batch 1) spread over more addresses; the cut adds the copies up.
constexpr int64_t kWideCopies = 8;
constexpr int kCutThreads = 512;  // the cut by a pass over the row (not wide)
constexpr int kVec = 16;          // scores a cut thread loads per tile (four 16-byte loads in flight)
constexpr int kSelectThreads = 256;
constexpr int kPerThread = 8;  // contiguous scores a compacting thread takes
constexpr int kChunk = kSelectThreads * kPerThread;
// Rows of at most this many chunks (a decode step's rows up to ~16K tokens of context, whose key lists a
// graph pads past 2,048) take the cut in each selection CTA, by a pass over the row, instead of from a
// cut_kernel launch before it.
constexpr int64_t kCutInSelect = 2;

// indexer_topk as its kernels get it.
struct IndexerLaunch : IndexerTopkParams {
  int32_t max_keys = 0;
  int32_t* err = nullptr;
  IndexerDots dots =
      IndexerDots::kCudaCores;  // the fast tier's: FP4 keys of at most kMmaHeads heads on the tensor cores
  FastDivide per_page;          // slot / keys.entries_per_page without a division

  IndexerLaunch(const IndexerTopkParams& p, int32_t max_keys_, int32_t* err_, IndexerDots dots_)
      : IndexerTopkParams(p),
        max_keys(max_keys_),
        err(err_),
        dots(dots_),
        per_page(static_cast<uint32_t>(std::max(keys.entries_per_page, 1))) {}
  IndexerLaunch() = default;
};

// The selection's threshold: score key `key`, of which the first `ties` (in index order) are selected.
struct Cut {
  uint32_t key;
  int ties;
};

// A token group's scratch (backend-internal, stream-ordered). Rows are indexed by t − t0.
struct Scratch {
  int64_t t0 = 0, cap = 0, stride = 0, chunks = 0;
  int eq_cap = 0;  // entries an eq list keeps: min(kChunk, topk)
  bool wide = false;
  int fine_copies = 1;           // wide: copies of a token's key histogram (kWideCopies over the group's tokens)
  int64_t ctas = 1;              // the scoring grid's CTAs a token
  int64_t parts = 1;             // byte histograms a token: each scoring CTA's own (not wide), or one shared
  uint32_t* coarse = nullptr;    // [group, parts, 256] counts of the high score-key byte
  uint32_t* fine = nullptr;      // [group, fine_copies, 65536] counts of the score key (wide only)
  uint32_t* done = nullptr;      // [group] compaction CTAs finished (cleared by the scores when not wide)
  uint32_t* gt_count = nullptr;  // [group] entries in gt (likewise)
  float* scores = nullptr;       // [group, stride], rows 16-byte aligned
  int32_t* gt = nullptr;         // [group, topk] indices above the cut, unordered
  int32_t* eq = nullptr;         // [group, chunks, eq_cap] indices at the cut, each chunk's first in order
  uint32_t* eq_count = nullptr;  // [group, chunks] indices at the cut per chunk
  Cut* cuts = nullptr;           // [group] from cut_kernel (not wide)
};

// Keys j < min(key_count[s], (positions[t] + 1) / ratio) of token t's sequence s (*seq = −1 when the
// sequence id is bad). Bad ids and counts, and more keys than `cap`, are reported and cut.
__device__ int64_t eligible_keys(const IndexerLaunch& a, int64_t t, int64_t cap, int64_t* seq) {
  const int64_t s = a.token_seq ? a.token_seq[t] : 0;
  *seq = -1;
  if (s < 0 || s >= a.sequences) {
    report(a.err, DeviceError::kIndexerSlot);
    return 0;
  }
  *seq = s;
  int64_t count = a.key_count[s];
  if (count < 0 || count > a.key_stride) {
    report(a.err, DeviceError::kIndexerSlot);
    count = count < 0 ? 0 : a.key_stride;
  }
  const int64_t e = max(int64_t{0}, min(count, (int64_t{a.positions[t]} + 1) / a.ratio));
  if (e > cap) {
    report(a.err, DeviceError::kIndexerSlot);
    return cap;
  }
  return e;
}

// Order-preserving 16-bit image of a score (larger score → larger key). Scores are bf16 values (or −inf),
// so their low 16 bits carry nothing and equal keys are equal scores.
__device__ __forceinline__ uint32_t score_key(float s) {
  const uint32_t u = __float_as_uint(s);
  return ((u & 0x80000000u) ? ~u : (u | 0x80000000u)) >> 16;
}

// ---- scoring ---------------------------------------------------------------------------------------

// Shared rows hold a vector ordered by the CPU dot's chains: element i (chain i % 8) at (i % 8)·16 + i / 8,
// so that chain c's 16 elements are 4 float4s.
__device__ __forceinline__ int chain_pos(int i) { return (i % 8) * 16 + i / 8; }

// core/number_formats.h's ue8m0_to_float (byte 0 is 2^-127).
__device__ __forceinline__ float ue8m0_value(uint32_t e) {
  return e == 255 ? __uint_as_float(0x7fc00000u) : (e == 0 ? 0x1p-127f : e8_value(static_cast<uint8_t>(e)));
}

// An e2m1 nibble's value from registers only (twice the magnitudes packed in one word), sign kept for 0.
__device__ __forceinline__ float fp4_value(uint32_t nibble) {
  const float mag = __fmul_rn(__uint2float_rn((0xC8643210u >> (4 * (nibble & 7))) & 15), 0.5f);
  return __uint_as_float(__float_as_uint(mag) | ((nibble & 8) << 28));
}

// Block b (elements 32b .. 32b + 31) of one key entry as fetched: thread i of the CTA takes block i % 4
// of the tile's key i / 4, loaded one tile ahead of its use.
template <KvEntryFormat F>
struct RawBlock {
  static constexpr int kWords = F == KvEntryFormat::kIndexFp4 ? 4 : (F == KvEntryFormat::kIndexFp8 ? 8 : 16);
  uint32_t w[kWords];
  uint32_t scale;  // fp4: the block's ue8m0 byte; fp8: the key's fp32 scale
  bool live;       // an eligible key in its table
  bool bad;        // an eligible key whose slot is outside the table (scores −inf)
};

// a.keys.entry(slot) for a slot the table holds (slots are int32), without a division.
__device__ __forceinline__ const uint8_t* key_entry(const IndexerLaunch& a, int32_t slot) {
  const uint32_t n = static_cast<uint32_t>(slot);
  const uint32_t page = a.per_page(n);
  const uint32_t in_page = n - page * static_cast<uint32_t>(a.keys.entries_per_page);
  return a.keys.base + int64_t{page} * a.keys.page_bytes + in_page * static_cast<uint32_t>(a.keys.entry_bytes);
}

// Slot of key j (−1 past the eligible keys), and of the key whose block this thread fetches for `tile`.
__device__ __forceinline__ int32_t key_slot(const IndexerLaunch& a, int64_t seq, int64_t n, int64_t j) {
  return j < n ? a.key_slots[seq * a.key_stride + j] : -1;
}
__device__ __forceinline__ int32_t tile_slot(const IndexerLaunch& a, int64_t seq, int64_t n, int64_t tile) {
  return key_slot(a, seq, n, tile * kTileKeys + threadIdx.x / 4);
}

// Block b of key j (at `slot`), as fetch_block's thread takes it.
template <KvEntryFormat F>
__device__ __forceinline__ void fetch_key_block(const IndexerLaunch& a, int64_t n, int64_t j, int b, int32_t slot,
                                                RawBlock<F>& raw) {
  raw.live = j < n && a.keys.holds(slot);
  raw.bad = j < n && !raw.live;
  if (raw.bad && b == 0) report(a.err, DeviceError::kIndexerSlot);
  if (!raw.live) return;
  const uint8_t* e = key_entry(a, slot);
  const uint32_t* p = reinterpret_cast<const uint32_t*>(e + 4 * RawBlock<F>::kWords * b);
#pragma unroll
  for (int i = 0; i < RawBlock<F>::kWords; ++i) raw.w[i] = p[i];
  if constexpr (F == KvEntryFormat::kIndexFp4) raw.scale = e[kDim / 2 + b];  // [64 B nibbles][4 ue8m0]
  if constexpr (F == KvEntryFormat::kIndexFp8) raw.scale = *reinterpret_cast<const uint32_t*>(e + kDim);
}
template <KvEntryFormat F>
__device__ __forceinline__ void fetch_block(const IndexerLaunch& a, int64_t n, int64_t tile, int32_t slot,
                                            RawBlock<F>& raw) {
  fetch_key_block(a, n, tile * kTileKeys + threadIdx.x / 4, static_cast<int>(threadIdx.x % 4), slot, raw);
}

// The 32 values of a fetched block and what the fused-product check needs: bounds on the smallest nonzero
// and the largest |value|, and whether every value has at most 16 significant bits.
template <KvEntryFormat F>
__device__ __forceinline__ void decode_block(const RawBlock<F>& raw, float (&v)[32], float* lo, float* hi,
                                             bool* short_mantissa) {
  if constexpr (F == KvEntryFormat::kIndexFp4) {
    const float s = ue8m0_value(raw.scale);
#pragma unroll
    for (int i = 0; i < 32; ++i) v[i] = __fmul_rn(fp4_value(raw.w[i / 8] >> (4 * (i % 8))), s);
    *lo = __fmul_rn(s, 0.5f);
    *hi = __fmul_rn(s, 6.0f);
    *short_mantissa = raw.scale != 0xffu;  // e2m1 values have 2 significant bits; a NaN scale takes the plain path
  } else if constexpr (F == KvEntryFormat::kIndexFp8) {  // [128 e4m3][fp32 scale]
    const float s = __uint_as_float(raw.scale);
#pragma unroll
    for (int i = 0; i < 32; ++i) v[i] = __fmul_rn(e4m3_to_f(static_cast<uint8_t>(raw.w[i / 4] >> (8 * (i % 4)))), s);
    *lo = __fmul_rn(fabsf(s), 0x1p-9f);  // the smallest nonzero e4m3 magnitude
    *hi = __fmul_rn(fabsf(s), 448.0f);
    *short_mantissa = (raw.scale & 0xfffu) == 0;  // code (4 bits) · s (<= 12 bits)
  } else {                                        // kBf16
    *lo = INFINITY;
    *hi = 0.0f;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      v[i] = __uint_as_float(i % 2 ? raw.w[i / 2] & 0xffff0000u : raw.w[i / 2] << 16);
      const float m = fabsf(v[i]);
      *hi = fmaxf(*hi, m);
      if (m != 0.0f) *lo = fminf(*lo, m);
    }
    *short_mantissa = true;
  }
}

// The fetched block into the key's shared row (zeros for a dead key). Returns whether the products with
// q (bounds qb: smallest nonzero |q|, largest |q|) are exact, so that an fma gives the CPU's bits.
template <KvEntryFormat F>
__device__ __forceinline__ bool stage_block(const RawBlock<F>& raw, float2 qb, float* row) {
  const int b = threadIdx.x % 4;
  float v[32] = {};
  bool exact = true;
  if (raw.live) {
    float lo, hi;
    bool short_mantissa;
    decode_block(raw, v, &lo, &hi, &short_mantissa);
    exact = short_mantissa && __fmul_rn(qb.x, lo) >= 0x1p-126f && __fmul_rn(qb.y, hi) <= 0x1p126f;
  }
#pragma unroll
  for (int c = 0; c < 8; ++c)  // elements 32b + 8m + c sit at chain_pos = 16c + 4b + m
    *reinterpret_cast<float4*>(row + chain_pos(32 * b + c)) = make_float4(v[c], v[8 + c], v[16 + c], v[24 + c]);
  return exact;
}

// w_h = bf16(weights_h · scale) of token t (0 for heads past a.heads: padded rows add nothing).
__device__ __forceinline__ float head_weight(const IndexerLaunch& a, int64_t t, int h) {
  return h < a.heads ? round_bf16(__fmul_rn(bf16_to_f(a.weights[t * a.heads + h]), a.weight_scale)) : 0.0f;
}

// q of token t into shared bf16 rows (heads padded to whole passes with zeros) and w[h] = bf16(w_h · scale);
// returns the smallest nonzero |q| and the largest |q|.
__device__ float2 load_query(const IndexerLaunch& a, int64_t t, int rows, uint16_t* q, float* w) {
  __shared__ float2 part[kScoreThreads / kWarp];
  const uint4* src = reinterpret_cast<const uint4*>(a.q + t * a.heads * kDim);
  float lo = INFINITY, hi = 0.0f;
  for (int i = threadIdx.x; i < rows * kDim / 8; i += kScoreThreads) {
    const int h = i / (kDim / 8), m = i % (kDim / 8);
    const uint4 v = h < a.heads ? src[i] : make_uint4(0, 0, 0, 0);
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      const float f = __uint_as_float(c % 2 ? words[c / 2] & 0xffff0000u : words[c / 2] << 16);
      q[h * kQRow + chain_pos(8 * m + c)] = static_cast<uint16_t>(__float_as_uint(f) >> 16);
      const float mag = fabsf(f);
      hi = fmaxf(hi, mag);
      if (mag != 0.0f) lo = fminf(lo, mag);
    }
  }
  for (int h = threadIdx.x; h < rows; h += kScoreThreads) w[h] = head_weight(a, t, h);
  for (int o = kWarp / 2; o > 0; o >>= 1) {
    lo = fminf(lo, __shfl_xor_sync(0xffffffffu, lo, o));
    hi = fmaxf(hi, __shfl_xor_sync(0xffffffffu, hi, o));
  }
  if (threadIdx.x % kWarp == 0) part[threadIdx.x / kWarp] = make_float2(lo, hi);
  __syncthreads();
  float2 r = part[0];
  for (int i = 1; i < kScoreThreads / kWarp; ++i) r = make_float2(fminf(r.x, part[i].x), fmaxf(r.y, part[i].y));
  return r;
}

// l + a·b rounded once. With kFused the product must be exact in fp32: then fma gives the same bits.
template <bool kFused>
__device__ __forceinline__ float mac(float a, float b, float l) {
  return kFused ? __fmaf_rn(a, b, l) : __fadd_rn(l, __fmul_rn(a, b));
}

__device__ __forceinline__ float component(const float4& v, int e) {
  return e == 0 ? v.x : e == 1 ? v.y : e == 2 ? v.z : v.w;
}

// Four bf16 (low half first) as fp32.
__device__ __forceinline__ float4 widen(uint2 v) {
  return make_float4(__uint_as_float(v.x << 16), __uint_as_float(v.x & 0xffff0000u), __uint_as_float(v.y << 16),
                     __uint_as_float(v.y & 0xffff0000u));
}

// Folds chain c's sum into the CPU's ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)), chain by chain, keeping at most
// three partial sums: `dot` (l0.., then the total), `pair` (l2+l3, then l4+l5..), `quad` (l6+l7).
__device__ __forceinline__ void fold_chain(int c, float l, float& dot, float& pair, float& quad) {
  if (c == 0) dot = l;
  if (c == 1) dot = __fadd_rn(dot, l);
  if (c == 2 || c == 4) pair = l;
  if (c == 3) dot = __fadd_rn(dot, __fadd_rn(pair, l));
  if (c == 5) pair = __fadd_rn(pair, l);
  if (c == 6) quad = l;
  if (c == 7) dot = __fadd_rn(dot, __fadd_rn(pair, __fadd_rn(quad, l)));
}

// This thread's 4 keys × 4 heads of a pass (keys and q: the pass's first rows, w its first weight): the
// CPU's dots (chain c adds the elements i ≡ c mod 8 in ascending i from 0, then the fold), each turned
// into its head term bf16(relu(bf16(dot))·w_h) in terms[key][head]. Operands come from registers, 16
// fmas to 8 shared loads; the 8 keys (4 heads) a warp loads at once are 16-byte pieces on distinct banks.
template <bool kFused>
__device__ void pass_terms(const float* keys, const uint16_t* q, const float* w, float* terms) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int key0 = 32 * (warp % 2) + lane % 8, head0 = 16 * (warp / 2) + lane / 8;
  const float* kr = keys + key0 * kRowFloats;
  const uint16_t* qr = q + head0 * kQRow;
  float dot[16], pair[16], quad[16];
#pragma unroll
  for (int c = 0; c < 8; ++c) {
    float acc[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) acc[i] = 0.0f;
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      float4 kv[4], qv[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) kv[r] = *reinterpret_cast<const float4*>(kr + 8 * r * kRowFloats + 16 * c + 4 * g);
#pragma unroll
      for (int h = 0; h < 4; ++h) qv[h] = widen(*reinterpret_cast<const uint2*>(qr + 4 * h * kQRow + 16 * c + 4 * g));
#pragma unroll
      for (int e = 0; e < 4; ++e) {
#pragma unroll
        for (int i = 0; i < 16; ++i) acc[i] = mac<kFused>(component(qv[i % 4], e), component(kv[i / 4], e), acc[i]);
      }
    }
#pragma unroll
    for (int i = 0; i < 16; ++i) fold_chain(c, acc[i], dot[i], pair[i], quad[i]);
  }
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int key = key0 + 8 * (i / 4), head = head0 + 4 * (i % 4);
    const float s = round_bf16(dot[i]);
    terms[key * kTermRow + head] = round_bf16(__fmul_rn(s < 0.0f ? 0.0f : s, w[head]));  // std::max(s, 0): NaN stays
  }
}

// A key's running head sum over one pass's terms, in head order.
__device__ __forceinline__ float add_terms(const float* terms, int heads, float total) {
  const float* t = terms + threadIdx.x * kTermRow;
#pragma unroll 16
  for (int h = 0; h < heads; ++h) total = __fadd_rn(total, t[h]);
  return total;
}

// Counts a live score: its high key byte in the CTA's counts, its whole key in the wide histogram (when
// given). Integer counts aggregated per warp (scores mostly share their high byte): the order is immaterial.
__device__ void count_score(bool live, float score, uint32_t* coarse, uint32_t* fine) {
  const uint32_t key = live ? score_key(score) : ~0u;
  const int lane = threadIdx.x % kWarp;
  uint32_t peers = __match_any_sync(0xffffffffu, live ? key >> 8 : ~0u);
  if (live && lane == __ffs(peers) - 1) atomicAdd(&coarse[key >> 8], static_cast<uint32_t>(__popc(peers)));
  if (!fine) return;
  peers = __match_any_sync(0xffffffffu, key);
  if (live && lane == __ffs(peers) - 1) atomicAdd(&fine[key], static_cast<uint32_t>(__popc(peers)));
}

// Without a wide histogram nothing clears the scratch before the scores: CTA 0 of each token clears the
// selection's counters (the selection runs after the whole grid). After pdl_enter.
__device__ __forceinline__ void clear_select_counts(const Scratch& s) {
  if (!s.wide && blockIdx.x == 0 && threadIdx.x == 0) s.done[blockIdx.y] = 0, s.gt_count[blockIdx.y] = 0;
}

// The scoring CTA's token (blockIdx.y of the group), its sequence and eligible keys, and its tiles.
struct CtaToken {
  int64_t t, seq, n, tiles;
};
__device__ CtaToken cta_token(const IndexerLaunch& a, const Scratch& s) {
  CtaToken c;
  c.t = s.t0 + blockIdx.y;
  c.n = eligible_keys(a, c.t, s.cap, &c.seq);
  c.tiles = (c.n + kTileKeys - 1) / kTileKeys;
  return c;
}

// The wide histogram copy the CTA counts token t's keys into (null: none).
__device__ __forceinline__ uint32_t* fine_copy(const Scratch& s, int64_t t) {
  if (!s.wide) return nullptr;
  return s.fine + ((t - s.t0) * s.fine_copies + blockIdx.x % s.fine_copies) * kWideBins;
}

// Key j's score from its head sum (bf16; −inf for a dead key or NaN, which ranks last; −0 → +0, a CPU
// tie), stored when eligible and counted. Whole warps call.
__device__ void put_score(int64_t j, int64_t n, float total, bool dead, float* out, uint32_t* coarse, uint32_t* fine) {
  float score = round_bf16(total);
  score = dead || isnan(score) ? -INFINITY : __fadd_rn(score, 0.0f);
  if (j < n) out[j] = score;
  count_score(j < n, score, coarse, fine);
}

// The CTA's byte counts: added into the token's histogram (wide: cleared before the call), else stored as
// the CTA's own, which the cut adds up (so that no clearing launch sits between the query's kernels and
// the scores). The whole CTA calls.
__device__ void flush_counts(const uint32_t* coarse, const Scratch& s, int64_t t) {
  __syncthreads();
  uint32_t* out = s.coarse + ((t - s.t0) * s.parts + (s.wide ? 0 : blockIdx.x)) * kBins;
  for (int b = threadIdx.x; b < kBins; b += blockDim.x) {
    if (!s.wide) {
      out[b] = coarse[b];
    } else if (coarse[b]) {
      atomicAdd(&out[b], coarse[b]);
    }
  }
}

// Row g's byte counts (n eligible keys) for a cut: the shared histogram (wide), else its scoring CTAs'
// own added up into `sums` (shared; CTAs past the row's tiles scored nothing). By the whole block.
__device__ const uint32_t* coarse_counts(const Scratch& s, int64_t g, int64_t n, uint32_t* sums) {
  const uint32_t* row = s.coarse + g * s.parts * kBins;
  if (s.wide) return row;
  const int64_t parts = min(s.parts, (n + kTileKeys - 1) / kTileKeys);
  for (int b = threadIdx.x; b < kBins; b += blockDim.x) {
    uint32_t c = 0;
    for (int64_t p = 0; p < parts; ++p) c += __ldcg(row + p * kBins + b);
    sums[b] = c;
  }
  __syncthreads();
  return sums;
}

// Grid (CTAs per token, tokens of the group); a CTA takes the token's key tiles blockIdx.x, + gridDim.x, ...
// and writes the scores, the byte histogram and (wide) the key histogram that the selection reads.
// score_j = bf16(Σ_h bf16(relu(bf16(q_h·K_j)) · w_h)) as the CPU: each dot with its chains and fold, the
// head sum in head order by one thread per key. Products q_i·k_i of a bf16 q and a key of <= 16
// significant bits are exact unless they leave the normal range; where the bounds rule that out for a
// whole tile, it takes the fma path (half the instructions), else mul + add.
template <KvEntryFormat F>
__global__ void __launch_bounds__(kScoreThreads, 2) score_kernel(IndexerLaunch a, Scratch s) {
  pdl_enter();
  extern __shared__ float4 smem[];
  __shared__ uint32_t coarse[kBins];
  __shared__ bool bad[kTileKeys];
  const auto [t, seq, n, tiles] = cta_token(a, s);
  clear_select_counts(s);
  if (blockIdx.x >= tiles) return;  // the whole CTA
  const int rows = (a.heads + kPassHeads - 1) / kPassHeads * kPassHeads;
  uint16_t* q = reinterpret_cast<uint16_t*>(smem);
  float* w = reinterpret_cast<float*>(q + rows * kQRow);
  float* keys = w + rows;
  float* terms = keys + kTileKeys * kRowFloats;
  for (int b = threadIdx.x; b < kBins; b += kScoreThreads) coarse[b] = 0;
  const float2 qb = load_query(a, t, rows, q, w);
  float* out = s.scores + (t - s.t0) * s.stride;
  uint32_t* fine = fine_copy(s, t);
  RawBlock<F> raw;
  fetch_block(a, n, blockIdx.x, tile_slot(a, seq, n, blockIdx.x), raw);
  int32_t ahead = tile_slot(a, seq, n, blockIdx.x + gridDim.x);
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    if (threadIdx.x % 4 == 0) bad[threadIdx.x / 4] = raw.bad;
    const bool fused = __syncthreads_and(stage_block(raw, qb, keys + (threadIdx.x / 4) * kRowFloats));
    const bool dead = threadIdx.x < kTileKeys && bad[threadIdx.x];
    fetch_block(a, n, tile + gridDim.x, ahead, raw);  // in flight while this tile is scored
    ahead = tile_slot(a, seq, n, tile + 2 * int64_t{gridDim.x});
    float total = 0.0f;
    for (int p = 0; p * kPassHeads < a.heads; ++p) {
      if (p > 0) __syncthreads();  // the previous pass's sums have read terms
      const uint16_t* qp = q + p * kPassHeads * kQRow;
      if (fused) {
        pass_terms<true>(keys, qp, w + p * kPassHeads, terms);
      } else {
        pass_terms<false>(keys, qp, w + p * kPassHeads, terms);
      }
      __syncthreads();
      if (threadIdx.x < kTileKeys) total = add_terms(terms, min(kPassHeads, a.heads - p * kPassHeads), total);
    }
    if (threadIdx.x < kTileKeys) put_score(tile * kTileKeys + threadIdx.x, n, total, dead, out, coarse, fine);
  }
  flush_counts(coarse, s, t);
}

// ---- scoring on the tensor cores (the fast tier) -------------------------------------------------------
// spec/NUMERICS.md lets the indexer's dots use the tensor cores with fp32 accumulation. An FP4 key is
// exact in bf16 (two significant bits times a power of two) and the query is bf16 already, so each dot
// q_h·K_j is a bf16 mma.sync with fp32 accumulators; the terms bf16(relu(bf16(dot))·w_h) keep the exact
// path's rounding points and the head sum is fixed: heads h and h + 8 of a thread, a butterfly over the
// eight rows of its lane quad, then the four head groups in order. A CTA of 8 warps scores tiles of 64
// keys: warp w multiplies heads 16(w % 4).. (q fragments held in registers for the whole CTA) by keys
// 32(w / 4)..; the head groups meet in shared memory.
constexpr int kMmaHeads = 64;           // heads the tensor-core path takes (zero rows pad them to 16s)
constexpr int kKeyRow = 2 * kDim + 16;  // bytes per shared bf16 key row: ldmatrix's 8 rows on distinct banks

struct MmaTile {
  alignas(16) uint8_t keys[kTileKeys][kKeyRow];
  float part[kMmaHeads / 16][kTileKeys];  // each head group's sums
  bool bad[kTileKeys];
};

// Eight e2m1 codes (nibble i = element i) as eight bf16 times `scale` (a power of two, or NaN), exactly:
// magnitudes by table (high and low bytes), the sign into bit 15, then a bf16 multiply per pair.
__device__ __forceinline__ uint4 e2m1x8_bf16(uint32_t v, __nv_bfloat162 scale) {
  constexpr uint32_t kHiLo = 0x3f3f3f00u, kHiHi = 0x40404040u;  // high bytes of {0, .5, 1, 1.5}, {2, 3, 4, 6}
  constexpr uint32_t kLoLo = 0xc0800000u, kLoHi = 0xc0804000u;  // their low bytes
  const uint32_t mag = v & 0x77777777u, sign = (v & 0x88888888u) >> 1;
  uint32_t out[4];
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // four codes a half
    const uint32_t m = mag >> (16 * h);
    const uint32_t hi = prmt(kHiLo, kHiHi, m) | prmt(0u, 0x80808080u, sign >> (16 * h));
    const uint32_t lo = prmt(kLoLo, kLoHi, m);
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      const uint32_t pair = prmt(lo, hi, p == 0 ? 0x5140u : 0x7362u);  // elements 2p, 2p + 1 as bf16x2
      const __nv_bfloat162 x = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&pair), scale);
      out[2 * h + p] = *reinterpret_cast<const uint32_t*>(&x);
    }
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

// A ue8m0 scale byte as a bf16 pair (byte 0 is 2^-127, a subnormal; 255 is NaN).
__device__ __forceinline__ __nv_bfloat162 ue8m0_bf16x2(uint32_t scale) {
  const uint16_t e = scale == 0xffu ? 0x7fc0u : (scale == 0 ? 0x0040u : static_cast<uint16_t>(scale << 7));
  return __halves2bfloat162(__ushort_as_bfloat16(e), __ushort_as_bfloat16(e));
}

// The fetched block (32 values) into the key's shared bf16 row: zeros for a dead key.
__device__ __forceinline__ void stage_block_bf16(const RawBlock<KvEntryFormat::kIndexFp4>& raw, uint8_t* row) {
  const int b = threadIdx.x % 4;
  uint4* dst = reinterpret_cast<uint4*>(row + 64 * b);
  if (!raw.live) {
#pragma unroll
    for (int i = 0; i < 4; ++i) dst[i] = make_uint4(0, 0, 0, 0);
    return;
  }
  const __nv_bfloat162 scale = ue8m0_bf16x2(raw.scale);
#pragma unroll
  for (int i = 0; i < 4; ++i) dst[i] = e2m1x8_bf16(raw.w[i], scale);
}

// The A fragments of heads h0.. (16 rows, all 128 columns: k-step k in a[k]) of token t, zero rows past
// the heads, loaded straight from q.
__device__ void load_q_fragments(const IndexerLaunch& a, int64_t t, int h0, uint32_t (&f)[kDim / 16][4]) {
  const int lane = threadIdx.x % kWarp, g = lane / 4, c = lane % 4;
  const uint16_t* q = a.q + t * a.heads * kDim;
  const bool lo = h0 + g < a.heads, hi = h0 + g + 8 < a.heads;
  const uint32_t* row_lo = reinterpret_cast<const uint32_t*>(q + (h0 + g) * kDim);
  const uint32_t* row_hi = reinterpret_cast<const uint32_t*>(q + (h0 + g + 8) * kDim);
#pragma unroll
  for (int k = 0; k < kDim / 16; ++k) {
    const int col = (16 * k + 2 * c) / 2;  // in bf16 pairs
    f[k][0] = lo ? row_lo[col] : 0u;
    f[k][1] = hi ? row_hi[col] : 0u;
    f[k][2] = lo ? row_lo[col + 4] : 0u;
    f[k][3] = hi ? row_hi[col + 4] : 0u;
  }
}

// A head's term bf16(relu(bf16(dot))·w) (std::max(s, 0): NaN stays).
__device__ __forceinline__ float head_term(float dot, float w) {
  const float s = round_bf16(dot);
  return round_bf16(__fmul_rn(s < 0.0f ? 0.0f : s, w));
}

// This warp's 16 heads x 32 keys of the staged tile into part[head group][key]: the dots on the tensor
// cores (two accumulator sets over alternating k-steps), then the terms and their sum over the 16 heads.
__device__ void mma_terms(MmaTile& sm, const uint32_t (&qf)[kDim / 16][4], float w_lo, float w_hi) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, group = warp % 4, key0 = 32 * (warp / 4);
  // ldmatrix x4 for key pair p: rows key0 + 16p + (lane % 8) + 8(lane / 16), 16-byte column lane / 8 % 2.
  const uint32_t ka = smem_addr(&sm.keys[key0 + lane % 8 + 8 * (lane / 16)][16 * (lane / 8 % 2)]);
  float acc[2][4][4] = {};
#pragma unroll
  for (int k = 0; k < kDim / 16; ++k) {
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      uint32_t kf[4];
      ldsm_x4(ka + 16 * p * kKeyRow + 32 * k, kf);
      mma_bf16(acc[k % 2][2 * p], qf[k], kf[0], kf[1]);
      mma_bf16(acc[k % 2][2 * p + 1], qf[k], kf[2], kf[3]);
    }
  }
  // acc[.][n][r]: row (head) lane / 4 + 8 (r / 2), column (key) 8n + 2(lane % 4) + r % 2.
  float sum[4][2];
#pragma unroll
  for (int n = 0; n < 4; ++n) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const float lo = acc[0][n][j] + acc[1][n][j], hi = acc[0][n][2 + j] + acc[1][n][2 + j];
      sum[n][j] = __fadd_rn(head_term(lo, w_lo), head_term(hi, w_hi));
    }
  }
#pragma unroll
  for (int o = 4; o < kWarp; o *= 2) {
#pragma unroll
    for (int n = 0; n < 4; ++n) {
#pragma unroll
      for (int j = 0; j < 2; ++j) sum[n][j] += __shfl_xor_sync(0xffffffffu, sum[n][j], o);
    }
  }
  if (lane < 4) {
#pragma unroll
    for (int n = 0; n < 4; ++n) {
#pragma unroll
      for (int j = 0; j < 2; ++j) sm.part[group][key0 + 8 * n + 2 * lane + j] = sum[n][j];
    }
  }
}

// score_kernel's grid, scratch and outputs with the dots on the tensor cores (FP4 keys, heads <= 64).
__global__ void __launch_bounds__(kScoreThreads, 2) score_mma_kernel(IndexerLaunch a, Scratch s) {
  pdl_enter();
  __shared__ MmaTile sm;
  __shared__ uint32_t coarse[kBins];
  const auto [t, seq, n, tiles] = cta_token(a, s);
  clear_select_counts(s);
  if (blockIdx.x >= tiles) return;  // the whole CTA
  for (int b = threadIdx.x; b < kBins; b += kScoreThreads) coarse[b] = 0;
  const int lane = threadIdx.x % kWarp, group = threadIdx.x / kWarp % 4, h0 = 16 * group;
  const bool live_group = h0 < a.heads;  // warp-uniform: groups past the heads add zeros
  uint32_t qf[kDim / 16][4];
  load_q_fragments(a, t, h0, qf);
  const float w_lo = head_weight(a, t, h0 + lane / 4), w_hi = head_weight(a, t, h0 + lane / 4 + 8);
  float* out = s.scores + (t - s.t0) * s.stride;
  uint32_t* fine = fine_copy(s, t);
  RawBlock<KvEntryFormat::kIndexFp4> raw;
  fetch_block(a, n, blockIdx.x, tile_slot(a, seq, n, blockIdx.x), raw);
  int32_t ahead = tile_slot(a, seq, n, blockIdx.x + gridDim.x);
  if (!live_group && lane < 4) {  // this warp's keys' sums stay zero
    for (int i = 0; i < 8; ++i) sm.part[group][32 * (threadIdx.x / kWarp / 4) + 8 * (i / 2) + 2 * lane + i % 2] = 0.0f;
  }
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    if (threadIdx.x % 4 == 0) sm.bad[threadIdx.x / 4] = raw.bad;
    stage_block_bf16(raw, sm.keys[threadIdx.x / 4]);
    __syncthreads();  // the tile is staged; the previous tile's part and bad were read
    const bool dead = threadIdx.x < kTileKeys && sm.bad[threadIdx.x];
    fetch_block(a, n, tile + gridDim.x, ahead, raw);  // in flight while this tile is scored
    ahead = tile_slot(a, seq, n, tile + 2 * int64_t{gridDim.x});
    if (live_group) mma_terms(sm, qf, w_lo, w_hi);
    __syncthreads();                // every head group's sums are in part; the keys were read
    if (threadIdx.x < kTileKeys) {  // whole warps
      const float* p = &sm.part[0][threadIdx.x];
      const float total = __fadd_rn(__fadd_rn(__fadd_rn(p[0], p[kTileKeys]), p[2 * kTileKeys]), p[3 * kTileKeys]);
      put_score(tile * kTileKeys + threadIdx.x, n, total, dead, out, coarse, fine);
    }
  }
  flush_counts(coarse, s, t);
}

// ---- scoring on wgmma (the fast tier's default) ------------------------------------------------------
// The same scores as score_mma_kernel with far fewer instructions a key. A CTA is one warpgroup over
// tiles of 64 keys: wgmma m64n64k16 with the keys as A, decoded from FP4 straight into registers, and q
// as B in shared memory (64 heads, 128-byte swizzle), fp32 accumulators. Thread (g, t) of warp w takes
// the 32-wide block t of keys 16w + g and 16w + g + 8; its A slots 2t, 2t + 1, 2t + 8, 2t + 9 of k step s
// hold that block's elements 4s .. 4s + 3, so q's B tile holds the dims in that permuted order (the K
// order of a dot is free as long as both operands agree). The terms bf16(relu(bf16(dot))·w_h) are formed
// as bf16 pairs, each rounding as the exact path's, and the head sum runs on the tensor cores too: the
// terms of 16 heads are an mma.sync A fragment as the accumulators lie, multiplied by ones (fp32
// accumulation, four head groups in order).
constexpr int kWgThreads = 128;
constexpr int kWgHalf = kMmaHeads * 128;  // bytes of q's B tile for 64 of the 128 dims
constexpr uint32_t kBf16Ones = 0x3f803f80u;

// q of token t as the B tile at qs (1024-byte aligned): head h's row of logical positions (mma_layout.h's
// indexer_b_position), 64 to a half, swizzled by 128 bytes; heads past a.heads are zeros. Every load is issued before
// the first store (a store could alias a later load: the loop would wait on each load in turn).
__device__ void stage_q_wgmma(const IndexerLaunch& a, int64_t t, uint8_t* qs) {
  constexpr int kPer = kMmaHeads * kDim / 8 / kWgThreads;  // 16-byte pieces (8 dims) a thread
  const uint4* q = reinterpret_cast<const uint4*>(a.q + t * a.heads * kDim);
  uint4 v[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int piece = static_cast<int>(threadIdx.x) + i * kWgThreads, h = piece / (kDim / 8);
    v[i] = h < a.heads ? q[piece] : make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int piece = static_cast<int>(threadIdx.x) + i * kWgThreads, h = piece / (kDim / 8), m = piece % (kDim / 8);
    const uint32_t words[4] = {v[i].x, v[i].y, v[i].z, v[i].w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {  // dims 8m + 2k, + 1: positions p, p + 1
      const int p = indexer_b_position(8 * m + 2 * k);
      sts_u32(smem_addr(qs + (p / 64) * kWgHalf + sw128_offset(h, 2 * (p % 64))), words[k]);
    }
  }
}

// The 16 bf16 pairs of a fetched block, in element order (zeros for a dead key).
__device__ __forceinline__ void block_pairs(const RawBlock<KvEntryFormat::kIndexFp4>& raw, uint32_t (&pairs)[16]) {
  if (!raw.live) {
#pragma unroll
    for (int i = 0; i < 16; ++i) pairs[i] = 0u;
    return;
  }
  const __nv_bfloat162 scale = ue8m0_bf16x2(raw.scale);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint4 v = e2m1x8_bf16(raw.w[i], scale);
    pairs[4 * i] = v.x, pairs[4 * i + 1] = v.y, pairs[4 * i + 2] = v.z, pairs[4 * i + 3] = v.w;
  }
}

// d (+)= A[64 x 16] · B[16 x 64]: A bf16 from registers (the mma.sync m16n8k16 layout a warp), B bf16 by
// descriptor, fp32 out.
__device__ __forceinline__ void wgmma_m64n64k16_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t db,
                                                   int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, "
      "%13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, "
      "%35}, %36, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
}

// Heads 8i + 2t, + 1 of accumulator row `row` (0: g, 1: g + 8) as the bf16 pair of their terms
// bf16(relu(bf16(dot))·w) (relu keeps NaN; a product of two bf16 rounded once, as the exact path's fp32
// product rounded to bf16).
__device__ __forceinline__ uint32_t term_pair(const float (&d)[32], int i, int row, uint32_t w) {
  const __nv_bfloat162 s = __floats2bfloat162_rn(d[4 * i + 2 * row], d[4 * i + 2 * row + 1]);
  const __nv_bfloat162 r = __hmax2_nan(s, __float2bfloat162_rn(0.0f));
  const __nv_bfloat162 x = __hmul2(r, *reinterpret_cast<const __nv_bfloat162*>(&w));
  return *reinterpret_cast<const uint32_t*>(&x);
}

// score_kernel's grid, scratch and outputs on wgmma (FP4 keys, heads <= 64); dynamic shared memory: q's B
// tile and its alignment.
// Only q is the previous kernel's output (the query's Hadamard): the token's key count, its first tile of
// keys and the head weights are read before pdl_enter (written two or more launches earlier, which are
// complete once this grid starts: every kernel waits on its own predecessor before releasing the next).
__global__ void __launch_bounds__(kWgThreads, 4) score_wgmma_kernel(IndexerLaunch a, Scratch s) {
  extern __shared__ uint8_t dyn[];
  __shared__ uint32_t coarse[kBins];
  const auto [t, seq, n, tiles] = cta_token(a, s);
  if (blockIdx.x >= tiles) {  // the whole CTA
    pdl_enter();
    return clear_select_counts(s);
  }
  uint8_t* qs = dyn + ((1024 - smem_addr(dyn) % 1024) % 1024);
  const int lane = threadIdx.x % kWarp, tq = lane % 4;
  const int r0 = 16 * static_cast<int>(threadIdx.x / kWarp) + lane / 4;  // this thread's keys r0, r0 + 8 of a tile
  const auto key = [&](int64_t tile, int k) { return tile * kTileKeys + r0 + 8 * k; };
  RawBlock<KvEntryFormat::kIndexFp4> raw[2];
  int32_t ahead[2];
#pragma unroll
  for (int k = 0; k < 2; ++k) {  // the first tile in flight while q is staged
    fetch_key_block(a, n, key(blockIdx.x, k), tq, key_slot(a, seq, n, key(blockIdx.x, k)), raw[k]);
    ahead[k] = key_slot(a, seq, n, key(blockIdx.x + gridDim.x, k));
  }
  const auto weight_bits = [&](int h) { return __float_as_uint(head_weight(a, t, h)) >> 16; };  // bf16 exact
  uint32_t w[8];  // bf16 pairs of w_h, heads 8i + 2t and + 1
#pragma unroll
  for (int i = 0; i < 8; ++i) w[i] = weight_bits(8 * i + 2 * tq) | weight_bits(8 * i + 2 * tq + 1) << 16;
  for (int b = threadIdx.x; b < kBins; b += kWgThreads) coarse[b] = 0;
  pdl_enter();
  clear_select_counts(s);
  stage_q_wgmma(a, t, qs);
  fence_async_shared();
  __syncthreads();  // q's tile and the counts are in place
  const uint32_t qa = smem_addr(qs);
  float* out = s.scores + (t - s.t0) * s.stride;
  uint32_t* fine = fine_copy(s, t);
  float d[32] = {};
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    uint32_t p0[16], p1[16];
    block_pairs(raw[0], p0);
    block_pairs(raw[1], p1);
    const bool bad = tq == 0 ? raw[0].bad : raw[1].bad;
#pragma unroll
    for (int k = 0; k < 2; ++k) {  // in flight while this tile is scored
      fetch_key_block(a, n, key(tile + gridDim.x, k), tq, ahead[k], raw[k]);
      ahead[k] = key_slot(a, seq, n, key(tile + 2 * int64_t{gridDim.x}, k));
    }
    wgmma_fence();
    pin_registers(d);
#pragma unroll
    for (int st = 0; st < 8; ++st) {
      const uint32_t af[4] = {p0[2 * st], p1[2 * st], p0[2 * st + 1], p1[2 * st + 1]};
      wgmma_m64n64k16_rs(d, af, sw128_desc(qa + (st / 4) * kWgHalf + 32 * (st % 4)), st);
    }
    wgmma_commit();
    wgmma_wait_all();
    pin_registers(d);
    float sum[4] = {};
#pragma unroll
    for (int m = 0; m < 4; ++m) {  // heads 16m .. 16m + 15
      const uint32_t tf[4] = {term_pair(d, 2 * m, 0, w[2 * m]), term_pair(d, 2 * m, 1, w[2 * m]),
                              term_pair(d, 2 * m + 1, 0, w[2 * m + 1]), term_pair(d, 2 * m + 1, 1, w[2 * m + 1])};
      mma_bf16(sum, tf, kBf16Ones, kBf16Ones);
    }
    // sum[0]: key r0's head sum (in every lane of the quad), sum[2]: key r0 + 8's; lanes 0 and 1 put them.
    put_score(tq < 2 ? key(tile, tq) : n, n, tq == 0 ? sum[0] : sum[2], bad, out, coarse, fine);
  }
  flush_counts(coarse, s, t);
}

// ---- the cut -----------------------------------------------------------------------------------------

// By one warp: the digit d at which the counts hist[255], hist[254], ... (from the top) reach `want`
// (1 <= want <= their sum); *digit = d, *left = want − (count above d). Lane l owns digits 255 − 8l down
// to 248 − 8l.
__device__ void pick_digit(const uint32_t* hist, int want, uint32_t* digit, int* left) {
  const int lane = threadIdx.x % kWarp;
  int own = 0;
  for (int m = 0; m < 8; ++m) own += static_cast<int>(hist[255 - 8 * lane - m]);
  int incl = own;
  for (int o = 1; o < kWarp; o <<= 1) {
    const int x = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += x;
  }
  int above = incl - own;
  if (above >= want || want > incl) return;
  for (int m = 0; m < 8; ++m) {
    const int d = 255 - 8 * lane - m, c = static_cast<int>(hist[d]);
    if (above + c >= want) {
      *digit = static_cast<uint32_t>(d);
      *left = want - above;
      return;
    }
    above += c;
  }
}

// The cut for the `want` (>= 1) best of a row: the high byte from the byte histogram, the low byte from
// the wide histogram's 256 keys under it, its `copies` added up. By the whole block.
__device__ Cut wide_cut(const uint32_t* coarse, const uint32_t* fine, int copies, int want) {
  __shared__ uint32_t digit, low[kBins];
  __shared__ int left;
  if (threadIdx.x < kWarp) pick_digit(coarse, want, &digit, &left);
  __syncthreads();
  const uint32_t high = digit;
  for (int b = threadIdx.x; b < kBins; b += blockDim.x) {
    uint32_t n = 0;
    for (int c = 0; c < copies; ++c) n += __ldcg(fine + (int64_t{c} * kWideBins + high * kBins + b));
    low[b] = n;
  }
  __syncthreads();
  if (threadIdx.x < kWarp) pick_digit(low, left, &digit, &left);  // reads left before writing it
  __syncthreads();
  const Cut cut{high << 8 | digit, left};
  __syncthreads();  // digit and left are reused
  return cut;
}

// Rows are scanned in tiles of blockDim·kVec scores; warp w takes the w-th run of 32·kVec, and its lane l
// the 16-byte vectors v·32 + l of that run (coalesced). Rows are 16-byte aligned and padded to a
// multiple of 4, so whole vectors stay inside the row; keys at j >= n are junk (callers test j < n).
__device__ __forceinline__ int64_t tile_index(int64_t base, int v, int e) {
  return base + (threadIdx.x / kWarp) * (kWarp * kVec) + v * (4 * kWarp) + (threadIdx.x % kWarp) * 4 + e;
}
__device__ __forceinline__ void load_keys(const float* row, int64_t n, int64_t base, uint32_t (&k)[kVec]) {
  float4 s[kVec / 4];
#pragma unroll
  for (int v = 0; v < kVec / 4; ++v) {
    const int64_t j = tile_index(base, v, 0);
    s[v] = j < n ? *reinterpret_cast<const float4*>(row + j) : make_float4(0, 0, 0, 0);
  }
#pragma unroll
  for (int v = 0; v < kVec / 4; ++v) {
    k[4 * v] = score_key(s[v].x);
    k[4 * v + 1] = score_key(s[v].y);
    k[4 * v + 2] = score_key(s[v].z);
    k[4 * v + 3] = score_key(s[v].w);
  }
}

// The cut for the `want` (>= 1) best of row[0, n): the high byte from the byte histogram, the low byte
// from one pass over the row. By the whole block.
__device__ Cut row_cut(const float* row, int64_t n, int want, const uint32_t* coarse) {
  __shared__ uint32_t hist[kBins];
  __shared__ uint32_t digit;
  __shared__ int left;
  if (threadIdx.x < kWarp) pick_digit(coarse, want, &digit, &left);
  for (int b = threadIdx.x; b < kBins; b += blockDim.x) hist[b] = 0;
  __syncthreads();
  const uint32_t high = digit;
  for (int64_t base = 0; base < n; base += int64_t{blockDim.x} * kVec) {
    uint32_t k[kVec];
    load_keys(row, n, base, k);
#pragma unroll
    for (int i = 0; i < kVec; ++i)
      if (tile_index(base, i / 4, i % 4) < n && (k[i] >> 8) == high) atomicAdd(&hist[k[i] & 0xffu], 1u);
  }
  __syncthreads();
  if (threadIdx.x < kWarp) pick_digit(hist, left, &digit, &left);  // reads left before writing it
  __syncthreads();
  return {high << 8 | digit, left};
}

// One CTA per token of the group (groups that take no wide histogram): the cut, for select_kernel.
__global__ void __launch_bounds__(kCutThreads) cut_kernel(IndexerLaunch a, Scratch s) {
  pdl_enter();
  const int64_t t = s.t0 + blockIdx.x;
  int64_t seq;
  const int64_t n = eligible_keys(a, t, s.cap, &seq);
  const int want = static_cast<int>(min(n, int64_t{a.topk}));
  Cut cut{0, 0};
  __shared__ uint32_t sums[kBins];
  if (want > 0) cut = row_cut(s.scores + (t - s.t0) * s.stride, n, want, coarse_counts(s, t - s.t0, n, sums));
  if (threadIdx.x == 0) s.cuts[t - s.t0] = cut;
}

// ---- selection ---------------------------------------------------------------------------------------

// Exclusive prefix sum over the block in thread order; *total gets the block's sum.
__device__ uint32_t block_exclusive_sum(uint32_t v, uint32_t* total) {
  __shared__ uint32_t warp_sums[kSelectThreads / kWarp];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  uint32_t incl = v;
  for (int o = 1; o < kWarp; o <<= 1) {
    const uint32_t x = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += x;
  }
  if (lane == kWarp - 1) warp_sums[warp] = incl;
  __syncthreads();
  uint32_t before = 0, sum = 0;
  for (int i = 0; i < kSelectThreads / kWarp; ++i) {
    before += i < warp ? warp_sums[i] : 0;
    sum += warp_sums[i];
  }
  __syncthreads();  // warp_sums is reused
  *total = sum;
  return before + incl - v;
}

// This thread's kPerThread contiguous scores of row[0, n) from j0 against the cut: bit e of *above / *at
// marks score j0 + e above / at it; keys[e] its score key.
__device__ __forceinline__ void classify(const float* row, int64_t n, int64_t j0, Cut cut, uint32_t* above,
                                         uint32_t* at, uint32_t (&keys)[kPerThread]) {
  *above = 0, *at = 0;
#pragma unroll
  for (int h = 0; h < kPerThread / 4; ++h) {
    const int64_t j = j0 + 4 * h;
    const float4 v = j < n ? *reinterpret_cast<const float4*>(row + j) : make_float4(0, 0, 0, 0);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const uint32_t k = score_key(component(v, e));
      const bool in = j + e < n;
      keys[4 * h + e] = k;
      *above |= static_cast<uint32_t>(in && k > cut.key) << (4 * h + e);
      *at |= static_cast<uint32_t>(in && k == cut.key) << (4 * h + e);
    }
  }
}

// Chunk c of row[0, n) (kChunk scores, 8 contiguous a thread): indices above the cut appended to the
// token's gt list (any order: the final sort orders them; they number fewer than topk), indices at the
// cut to the chunk's eq list in index order (the first eq_cap: no more can be chosen), and their count.
__device__ void compact_chunk(const float* row, int64_t n, int64_t c, Cut cut, int topk, uint32_t* gt_count,
                              int32_t* gt, int32_t* eq, int eq_cap, uint32_t* eq_count) {
  __shared__ uint32_t gt_base;
  const int64_t j0 = c * kChunk + threadIdx.x * kPerThread;
  uint32_t above, at, keys[kPerThread];
  classify(row, n, j0, cut, &above, &at, keys);
  uint32_t total;  // counts above in the low 16 bits, at the cut in the high (a chunk has 2048 scores)
  const uint32_t before = block_exclusive_sum(__popc(above) | __popc(at) << 16, &total);
  if (threadIdx.x == 0) gt_base = (total & 0xffffu) ? atomicAdd(gt_count, total & 0xffffu) : 0;
  __syncthreads();
  uint32_t ga = gt_base + (before & 0xffffu), ea = before >> 16;
#pragma unroll
  for (int e = 0; e < kPerThread; ++e) {
    const int32_t j = static_cast<int32_t>(j0 + e);
    if ((above >> e) & 1) {
      if (ga < static_cast<uint32_t>(topk)) gt[ga] = j;
      ++ga;
    } else if ((at >> e) & 1) {
      if (ea < static_cast<uint32_t>(eq_cap)) eq[ea] = j;
      ++ea;
    }
  }
  if (threadIdx.x == 0) *eq_count = total >> 16;
}

// Whether this CTA is the last of `ctas` to finish (their writes then visible to it: read them with
// __ldcg, past L1). Every CTA calls it once.
__device__ bool last_to_finish(uint32_t* done, int64_t ctas) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(done, 1u) == static_cast<uint32_t>(ctas - 1);
  __syncthreads();
  if (last) __threadfence();
  return last;
}

// keys[0, size) descending (size a power of two), bitonic.
__device__ void sort_descending(uint64_t* keys, int size) {
  for (int block = 2; block <= size; block *= 2) {
    for (int stride = block / 2; stride > 0; stride /= 2) {
      for (int i = threadIdx.x; i < size / 2; i += blockDim.x) {
        const int lo = 2 * stride * (i / stride) + i % stride, hi = lo + stride;
        const uint64_t x = keys[lo], y = keys[hi];
        if ((x < y) == ((lo & block) == 0)) {  // descending where (lo & block) == 0, which the last pass is
          keys[lo] = y;
          keys[hi] = x;
        }
      }
      __syncthreads();
    }
  }
}

// Output rank r of token t: key index j (−1: none) and its slot.
__device__ __forceinline__ void put(const IndexerLaunch& a, int64_t t, int64_t seq, int64_t r, int32_t j) {
  a.out_index[t * a.topk + r] = j;
  if (a.out_slots) a.out_slots[t * a.topk + r] = j >= 0 ? a.slot_map[seq * a.key_stride + j] : -1;
}

// The chosen indices at the cut, in index order, to ranks first, first + 1, ...: each chunk's list after
// the ties of the chunks before it, until `ties` are placed. A group of chunks at a time, a rank a thread:
// rank r's chunk is the last whose start is at most r (found by bisection), so the lists' loads go out
// together rather than a chunk after another (a 1M row has 128 chunks, most holding a few ties).
__device__ void put_ties(const IndexerLaunch& a, const Scratch& s, int64_t t, int64_t seq, int64_t chunks, int first,
                         int ties) {
  __shared__ uint32_t start[kSelectThreads];
  const int32_t* eq = s.eq + (t - s.t0) * s.chunks * s.eq_cap;
  const uint32_t* eq_count = s.eq_count + (t - s.t0) * s.chunks;
  const uint32_t need = static_cast<uint32_t>(ties);
  uint32_t placed = 0;  // ties in the chunks before this group of chunks
  for (int64_t c0 = 0; c0 < chunks && placed < need; c0 += kSelectThreads) {
    const int64_t c = c0 + threadIdx.x;
    uint32_t group;
    start[threadIdx.x] = block_exclusive_sum(c < chunks ? __ldcg(eq_count + c) : 0, &group);
    __syncthreads();
    const uint32_t n = min(group, need - placed);
    for (uint32_t r = threadIdx.x; r < n; r += kSelectThreads) {
      int i = 0;  // the last chunk of the group starting at or before r (it holds r: its count is > 0)
      for (int step = kSelectThreads / 2; step > 0; step /= 2)
        if (start[i + step] <= r) i += step;
      put(a, t, seq, first + placed + r, __ldcg(eq + (c0 + i) * s.eq_cap + (r - start[i])));
    }
    __syncthreads();  // start is reused
    placed += group;
  }
}

// Ranks 0 .. above − 1 of token t from keys[0, above) (score key << 32 | ~j: unique, lower j first among
// equal scores), sorted here by the block; keys has room for the next power of two.
__device__ void put_sorted(const IndexerLaunch& a, int64_t t, int64_t seq, uint64_t* keys, int above) {
  int size = 1;
  while (size < above) size *= 2;
  for (int i = above + threadIdx.x; i < size; i += kSelectThreads) keys[i] = 0;  // below every real key
  __syncthreads();
  sort_descending(keys, size);
  for (int r = threadIdx.x; r < above; r += kSelectThreads)
    put(a, t, seq, r, static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(keys[r])));
}

__device__ __forceinline__ uint64_t rank_key(uint32_t score_key, uint32_t j) {
  return uint64_t{score_key} << 32 | (0xffffffffu - j);
}

// The token's output row, by the last compaction CTA: the indices above the cut sorted by (score
// descending, index ascending), then those at the cut in index order, then −1 holes.
__device__ void finish_token(const IndexerLaunch& a, const Scratch& s, int64_t t, int64_t seq, int64_t chunks, int kk,
                             Cut cut, uint64_t* keys) {
  const float* row = s.scores + (t - s.t0) * s.stride;
  const int32_t* gt = s.gt + (t - s.t0) * a.topk;
  const int above = kk - cut.ties;
  for (int i = threadIdx.x; i < above; i += kSelectThreads) {
    const uint32_t j = static_cast<uint32_t>(__ldcg(gt + i));
    keys[i] = rank_key(score_key(row[j]), j);
  }
  put_sorted(a, t, seq, keys, above);
  put_ties(a, s, t, seq, chunks, above, cut.ties);
  for (int r = kk + threadIdx.x; r < a.topk; r += kSelectThreads) put(a, t, seq, r, -1);
}

// A row of one chunk (decode up to 8K tokens of context) by its one CTA in shared memory: the output of
// compact_chunk then finish_token, without their global lists, counters and fences.
__device__ void select_one_chunk(const IndexerLaunch& a, const Scratch& s, int64_t t, int64_t seq, int64_t n, int kk,
                                 Cut cut, uint64_t* keys) {
  __shared__ int32_t ties[kChunk];
  const int64_t j0 = threadIdx.x * kPerThread;
  uint32_t above, at, k[kPerThread];
  classify(s.scores + (t - s.t0) * s.stride, n, j0, cut, &above, &at, k);
  uint32_t total;
  const uint32_t before = block_exclusive_sum(__popc(above) | __popc(at) << 16, &total);
  uint32_t ga = before & 0xffffu, ea = before >> 16;
#pragma unroll
  for (int e = 0; e < kPerThread; ++e) {
    const auto j = static_cast<uint32_t>(j0 + e);
    if ((above >> e) & 1) {
      if (ga < static_cast<uint32_t>(a.topk)) keys[ga] = rank_key(k[e], j);
      ++ga;
    } else if ((at >> e) & 1) {
      if (ea < static_cast<uint32_t>(cut.ties)) ties[ea] = static_cast<int32_t>(j);
      ++ea;
    }
  }
  const int n_above = kk - cut.ties;
  put_sorted(a, t, seq, keys, n_above);  // its barrier publishes ties too
  for (int r = threadIdx.x; r < cut.ties; r += kSelectThreads) put(a, t, seq, n_above + r, ties[r]);
  for (int r = kk + threadIdx.x; r < a.topk; r += kSelectThreads) put(a, t, seq, r, -1);
}

// Grid (chunks of the longest row, tokens of the group): the compaction of one chunk against the token's
// cut (from the histograms when wide; by a pass over the row here in plans of at most kCutInSelect
// chunks; else from cut_kernel), then the output row by the last CTA; a row of one chunk all in its CTA.
__global__ void __launch_bounds__(kSelectThreads) select_kernel(IndexerLaunch a, Scratch s) {
  const int64_t t = s.t0 + blockIdx.y;
  int64_t seq;
  const int64_t n = eligible_keys(a, t, s.cap, &seq);  // step inputs, before the wait on the scores
  pdl_enter();
  const int64_t chunks = max(int64_t{1}, (n + kChunk - 1) / kChunk);
  if (blockIdx.x >= chunks) return;  // the whole CTA
  const int64_t g = t - s.t0;
  const int kk = static_cast<int>(min(n, int64_t{a.topk}));
  Cut cut{0, 0};
  if (kk > 0) {
    if (s.wide) {
      cut = wide_cut(s.coarse + g * kBins, s.fine + g * s.fine_copies * kWideBins, s.fine_copies, kk);
    } else if (s.chunks <= kCutInSelect) {  // each CTA passes over the (short) row itself: no cut_kernel
      __shared__ uint32_t sums[kBins];
      cut = row_cut(s.scores + g * s.stride, n, kk, coarse_counts(s, g, n, sums));
    } else {
      cut = s.cuts[g];
    }
  }
  __shared__ uint64_t keys[kMaxTopk];  // the sort's, by finish_token or select_one_chunk
  if (chunks == 1) return select_one_chunk(a, s, t, seq, n, kk, cut, keys);
  compact_chunk(s.scores + g * s.stride, n, blockIdx.x, cut, a.topk, s.gt_count + g, s.gt + g * a.topk,
                s.eq + (g * s.chunks + blockIdx.x) * s.eq_cap, s.eq_cap, s.eq_count + g * s.chunks + blockIdx.x);
  if (last_to_finish(s.done + g, chunks)) finish_token(a, s, t, seq, chunks, kk, cut, keys);
}

// ---- host ------------------------------------------------------------------------------------------

int64_t key_entry_bytes(KvEntryFormat f) {
  switch (f) {
    case KvEntryFormat::kIndexFp4:
      return kDim / 2 + kDim / 32;
    case KvEntryFormat::kIndexFp8:
      return kDim + 4;
    case KvEntryFormat::kBf16:
      return 2 * kDim;
    default:
      return 0;
  }
}

// The next 256-byte aligned piece of n T's at base + *used (nullptr when sizing only).
template <typename T>
void take(char* base, size_t* used, T*& p, int64_t n) {
  p = base ? reinterpret_cast<T*>(base + *used) : nullptr;
  *used += (static_cast<size_t>(n) * sizeof(T) + 255) / 256 * 256;
}

// Lays the group's scratch out from `base` (nullptr: sizes only), the counts first so that one memset of
// *count_bytes clears them; the selection's own counters (done, gt_count) lead, in *select_bytes, so that
// IndexerSplit can rerun the selection alone. Returns the total bytes.
size_t carve(char* base, int64_t group, int topk, Scratch& s, size_t* count_bytes, size_t* select_bytes) {
  size_t used = 0;
  take(base, &used, s.done, group);
  take(base, &used, s.gt_count, group);
  *select_bytes = used;
  take(base, &used, s.coarse, group * s.parts * kBins);
  take(base, &used, s.fine, s.wide ? group * s.fine_copies * kWideBins : 0);
  *count_bytes = used;
  take(base, &used, s.scores, group * s.stride);
  take(base, &used, s.gt, group * topk);
  take(base, &used, s.eq, group * s.chunks * s.eq_cap);
  take(base, &used, s.eq_count, group * s.chunks);
  take(base, &used, s.cuts, group);
  return used;
}

// The kernel that scores a call, its dynamic shared memory and block size.
struct Scoring {
  void (*kernel)(IndexerLaunch, Scratch);
  size_t smem;
  int threads;
};
Scoring scoring_of(const IndexerLaunch& a) {
  if (a.dots != IndexerDots::kCudaCores && a.keys.format == KvEntryFormat::kIndexFp4 && a.heads <= kMmaHeads) {
    if (a.dots == IndexerDots::kMmaSync) return {score_mma_kernel, 0, kScoreThreads};
    return {score_wgmma_kernel, 2 * kWgHalf + 1024, kWgThreads};  // q's tile, aligned to 1024 bytes inside
  }
  const int rows = (a.heads + kPassHeads - 1) / kPassHeads * kPassHeads;
  const size_t smem = sizeof(uint16_t) * rows * kQRow + sizeof(float) * (rows + kTileKeys * (kRowFloats + kTermRow));
  switch (a.keys.format) {
    case KvEntryFormat::kIndexFp4:
      return {score_kernel<KvEntryFormat::kIndexFp4>, smem, kScoreThreads};
    case KvEntryFormat::kIndexFp8:
      return {score_kernel<KvEntryFormat::kIndexFp8>, smem, kScoreThreads};
    default:
      return {score_kernel<KvEntryFormat::kBf16>, smem, kScoreThreads};
  }
}

// The scoring CTAs a token of a group takes: one wave of the kernel over the group (each CTA loops over its
// token's tiles, q loaded once a CTA), at most one a tile.
int64_t scoring_ctas(const Scoring& k, int64_t group, int64_t cap) {
  allow_dynamic_smem(k.kernel, k.smem);
  int per_sm = 0;
  DSV4_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k.kernel, k.threads, k.smem));
  const int64_t tiles = (cap + kTileKeys - 1) / kTileKeys;
  return std::clamp<int64_t>((int64_t{sm_count()} * std::max(per_sm, 1) + group - 1) / group, 1,
                             std::max<int64_t>(tiles, 1));
}

// A call's token group size and scratch layout (scratch.t0 = 0; pointers set by carve on the allocation).
struct Plan {
  Scratch scratch;
  int64_t group = 0;
  size_t bytes = 0, count_bytes = 0, select_bytes = 0;
};

// Checks the arguments and sizes the token groups' scratch.
Plan make_plan(const IndexerLaunch& a) {
  DSV4_CUDA_REQUIRE(a.head_dim == kDim, "indexer_topk: head_dim must be 128");
  DSV4_CUDA_REQUIRE(a.heads >= 1 && a.heads <= kMaxHeads, "indexer_topk: heads must lie in [1, 256]");
  DSV4_CUDA_REQUIRE(a.topk >= 1 && a.topk <= kMaxTopk, "indexer_topk: topk must lie in [1, 2048]");
  DSV4_CUDA_REQUIRE(a.ratio > 0 && a.key_stride >= 0 && a.sequences > 0,
                    "indexer_topk: bad ratio, key_stride or sequences");
  DSV4_CUDA_REQUIRE(key_entry_bytes(a.keys.format) > 0 && a.keys.entry_bytes == key_entry_bytes(a.keys.format),
                    "indexer_topk: keys must be index-fp4, index-fp8 or bf16 entries of dim 128");
  DSV4_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(a.keys.base) % 4 == 0 && a.keys.page_bytes % 4 == 0,
                    "indexer_topk: the key table must be 4-byte aligned");
  DSV4_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(a.q) % 16 == 0, "indexer_topk: q must be 16-byte aligned");
  DSV4_CUDA_REQUIRE(!a.out_slots || a.slot_map, "indexer_topk: out_slots needs slot_map");
  // Tokens in groups whose scratch stays within the budget. Long rows of few tokens (decode at long
  // context) take wide histograms, which give the cut without another pass over the row.
  Plan p;
  Scratch& s = p.scratch;
  s.cap = a.max_keys > 0 ? std::min<int64_t>(a.key_stride, a.max_keys) : a.key_stride;
  s.stride = (s.cap + 3) / 4 * 4;
  s.chunks = std::max<int64_t>(1, (s.cap + kChunk - 1) / kChunk);
  s.eq_cap = std::min(kChunk, a.topk);
  const size_t per_token = carve(nullptr, 1, a.topk, s, &p.count_bytes, &p.select_bytes);
  p.group = std::clamp<int64_t>(kScratchBudget / static_cast<int64_t>(per_token), 1,
                                std::min<int64_t>(std::max<int64_t>(a.tokens, 1), 65535));
  s.wide = p.group <= kWideTokens && s.stride >= kWideRow;
  if (s.wide) s.fine_copies = static_cast<int>(std::max<int64_t>(1, kWideCopies / p.group));
  s.ctas = scoring_ctas(scoring_of(a), p.group, s.cap);  // from the full group: a smaller last one keeps it
  s.parts = s.wide ? 1 : s.ctas;
  p.bytes = carve(nullptr, p.group, a.topk, s, &p.count_bytes, &p.select_bytes);
  return p;
}

// Scores of tokens s.t0 .. s.t0 + g − 1 with their histograms (a wide one's counts cleared first).
void score_group(const IndexerLaunch& a, const Scratch& s, int64_t g, char* base, size_t count_bytes,
                 cudaStream_t stream) {
  if (s.wide) DSV4_CUDA_CHECK(cudaMemsetAsync(base, 0, count_bytes, stream));
  if (s.cap == 0) return;  // rows of one (empty) chunk: the selection reads no counts
  const Scoring k = scoring_of(a);
  const dim3 grid(static_cast<unsigned>(s.ctas), static_cast<unsigned>(g));
  launch_kernel(k.kernel, grid, k.threads, k.smem, stream, a, s);
}

// The output rows of the group from its scores and histograms (done and gt_count zero: the scores clear
// them, or the wide histogram's clearing).
void select_group(const IndexerLaunch& a, const Scratch& s, int64_t g, cudaStream_t stream) {
  if (!s.wide && s.chunks > kCutInSelect) {
    launch_kernel(cut_kernel, static_cast<unsigned>(g), kCutThreads, 0, stream, a, s);
  }
  launch_kernel(select_kernel, dim3(static_cast<unsigned>(s.chunks), static_cast<unsigned>(g)), kSelectThreads, 0,
                stream, a, s);
}

}  // namespace

void indexer_topk(const IndexerTopkParams& params, int32_t* err, IndexerDots dots, cudaStream_t stream,
                  int32_t max_keys) {
  const IndexerLaunch a(params, max_keys, err, dots);
  Plan p = make_plan(a);
  if (a.tokens == 0) return;
  Scratch& s = p.scratch;
  char* base = nullptr;
  DSV4_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&base), p.bytes, stream));
  carve(base, p.group, a.topk, s, &p.count_bytes, &p.select_bytes);
  for (s.t0 = 0; s.t0 < a.tokens; s.t0 += p.group) {
    const int64_t g = std::min(p.group, a.tokens - s.t0);
    score_group(a, s, g, base, p.count_bytes, stream);
    select_group(a, s, g, stream);
  }
  DSV4_CUDA_CHECK(cudaFreeAsync(base, stream));
}

struct IndexerSplit::State {
  IndexerLaunch a;
  cudaStream_t stream;
  Plan plan;
  char* base = nullptr;
};

IndexerSplit::IndexerSplit(const IndexerTopkParams& p, int32_t* err, IndexerDots dots, cudaStream_t stream,
                           int32_t max_keys)
    : state_(std::make_unique<State>()) {
  State& st = *state_;
  st.a = IndexerLaunch(p, max_keys, err, dots);
  const IndexerLaunch& a = st.a;
  st.stream = stream;
  st.plan = make_plan(a);
  DSV4_CUDA_REQUIRE(a.tokens >= 1 && a.tokens <= st.plan.group, "IndexerSplit: the tokens must fit one token group");
  DSV4_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&st.base), st.plan.bytes));
  carve(st.base, st.plan.group, a.topk, st.plan.scratch, &st.plan.count_bytes, &st.plan.select_bytes);
}

IndexerSplit::~IndexerSplit() {
  if (state_ && state_->base) cudaFree(state_->base);  // waits for the work in flight; a destructor cannot throw
}

void IndexerSplit::score() {
  const State& st = *state_;
  score_group(st.a, st.plan.scratch, st.a.tokens, st.base, st.plan.count_bytes, st.stream);
}

void IndexerSplit::select() {
  const State& st = *state_;
  DSV4_CUDA_CHECK(cudaMemsetAsync(st.base, 0, st.plan.select_bytes, st.stream));
  select_group(st.a, st.plan.scratch, st.a.tokens, st.stream);
}

}  // namespace dsv4::cuda
