#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/indexer.h"

namespace dsv4::cuda {
namespace {

constexpr int kDim = 128;  // index_head_dim: a key lives in 128 registers of one thread
constexpr int kMaxHeads = 256;
constexpr int kScoreThreads = 128;  // one key per thread
constexpr int kSelectThreads = 512;
constexpr int kMaxTopk = 2048;
constexpr int kWideBins = 65536;     // a wide histogram counts every 16-bit score key,
constexpr int64_t kWideTokens = 64;  // for token groups this small
constexpr int64_t kWideRow = 32768;  // with rows this long
constexpr int kVec = 16;             // scores a selecting thread loads per tile (four 16-byte loads in flight)
constexpr int64_t kScoreBudget = int64_t{1} << 26;  // fp32 scores per token group (256 MiB)

// Keys j < min(key_count[s], (positions[t] + 1) / ratio) of token t's sequence s (*seq = −1 when the
// sequence id is bad). Bad ids and counts, and more keys than `cap`, are reported and cut.
__device__ int64_t eligible_keys(const IndexerArgs& a, int64_t t, int64_t cap, int64_t* seq) {
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

// ---- scoring ---------------------------------------------------------------------------------------

// Order-preserving 16-bit image of a score (larger score → larger key). Scores are bf16 values (or −inf),
// so their low 16 bits carry nothing and equal keys are equal scores.
__device__ __forceinline__ uint32_t score_key(float s) {
  const uint32_t u = __float_as_uint(s);
  return ((u & 0x80000000u) ? ~u : (u | 0x80000000u)) >> 16;
}

// A decoded key and what the fused-product check needs: the smallest nonzero and the largest |k_i|
// (bounds are enough), and whether every k_i has at most 16 significant bits.
struct Key {
  float v[kDim];
  float min_nonzero;
  float max_abs;
  bool short_mantissa;
};

template <int N>
__device__ __forceinline__ void load_words(const uint8_t* p, uint32_t (&w)[N]) {
  if (N % 4 == 0 && (reinterpret_cast<uintptr_t>(p) & 15) == 0) {
#pragma unroll
    for (int i = 0; i < N / 4; ++i) {
      const uint4 v = reinterpret_cast<const uint4*>(p)[i];
      w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) w[i] = reinterpret_cast<const uint32_t*>(p)[i];
  }
}

// core/number_formats.h's ue8m0_to_float (byte 0 is 2^-127).
__device__ __forceinline__ float ue8m0_value(uint32_t e) {
  return e == 255 ? __uint_as_float(0x7fc00000u) : (e == 0 ? 0x1p-127f : e8_value(static_cast<uint8_t>(e)));
}

// An e2m1 nibble's value from registers only (twice the magnitudes packed in one word), sign kept for 0.
__device__ __forceinline__ float fp4_value(uint32_t nibble) {
  const float mag = __fmul_rn(__uint2float_rn((0xC8643210u >> (4 * (nibble & 7))) & 15), 0.5f);
  return __uint_as_float(__float_as_uint(mag) | ((nibble & 8) << 28));
}

template <EntryFormat F>
__device__ __forceinline__ void decode_key(const uint8_t* e, Key& k) {
  if constexpr (F == EntryFormat::kIndexFp4) {  // [64 B nibbles][4 ue8m0]
    uint32_t w[kDim / 8];
    load_words(e, w);
    const uint32_t sc = *reinterpret_cast<const uint32_t*>(e + kDim / 2);
    float s[kDim / 32];
    float lo = INFINITY, hi = 0.0f;
    bool finite = true;
#pragma unroll
    for (int b = 0; b < kDim / 32; ++b) {
      const uint32_t byte = (sc >> (8 * b)) & 0xffu;
      s[b] = ue8m0_value(byte);
      finite &= byte != 0xffu;
      lo = fminf(lo, s[b]);
      hi = fmaxf(hi, s[b]);
    }
#pragma unroll
    for (int i = 0; i < kDim; ++i) k.v[i] = __fmul_rn(fp4_value(w[i / 8] >> (4 * (i % 8))), s[i / 32]);
    k.min_nonzero = __fmul_rn(lo, 0.5f);
    k.max_abs = __fmul_rn(hi, 6.0f);
    k.short_mantissa = finite;  // e2m1 values have 2 significant bits; a NaN scale takes the plain path
  } else if constexpr (F == EntryFormat::kIndexFp8) {  // [128 e4m3][fp32 scale]
    uint32_t w[kDim / 4];
    load_words(e, w);
    const float s = __uint_as_float(*reinterpret_cast<const uint32_t*>(e + kDim));
#pragma unroll
    for (int i = 0; i < kDim; ++i) k.v[i] = __fmul_rn(e4m3_to_f(static_cast<uint8_t>(w[i / 4] >> (8 * (i % 4)))), s);
    k.min_nonzero = __fmul_rn(fabsf(s), 0x1p-9f);  // the smallest nonzero e4m3 magnitude
    k.max_abs = __fmul_rn(fabsf(s), 448.0f);
    k.short_mantissa = (__float_as_uint(s) & 0xfffu) == 0;  // code (4 bits) · s (<= 12 bits)
  } else {                                                  // kBf16
    uint32_t w[kDim / 2];
    load_words(e, w);
    float lo = INFINITY, hi = 0.0f;
#pragma unroll
    for (int i = 0; i < kDim; ++i) {
      k.v[i] = __uint_as_float(i % 2 ? w[i / 2] & 0xffff0000u : w[i / 2] << 16);
      const float m = fabsf(k.v[i]);
      hi = fmaxf(hi, m);
      if (m != 0.0f) lo = fminf(lo, m);
    }
    k.min_nonzero = lo;
    k.max_abs = hi;
    k.short_mantissa = true;
  }
}

// l + a·b rounded once. With kFused the product must be exact in fp32: then fma gives the same bits.
template <bool kFused>
__device__ __forceinline__ float mac(float a, float b, float l) {
  return kFused ? __fmaf_rn(a, b, l) : __fadd_rn(l, __fmul_rn(a, b));
}

// Σ_h bf16(relu(bf16(q_h·k))·w_h) in head order (bf16 of the total by the caller); q_h·k with the CPU's
// dot: 8 lanes, lane i summing elements ≡ i (mod 8) in order, then ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)).
template <bool kFused>
__device__ float head_sum(const float* q, const float* w, int heads, const Key& k) {
  float total = 0.0f;
  for (int h = 0; h < heads; ++h) {
    const float4* qh = reinterpret_cast<const float4*>(q + h * kDim);
    float l[8] = {};
#pragma unroll
    for (int i = 0; i < kDim / 4; ++i) {
      const float4 v = qh[i];  // a broadcast: every thread of the CTA reads the same q
      const int o = (4 * i) % 8;
      l[o] = mac<kFused>(v.x, k.v[4 * i], l[o]);
      l[o + 1] = mac<kFused>(v.y, k.v[4 * i + 1], l[o + 1]);
      l[o + 2] = mac<kFused>(v.z, k.v[4 * i + 2], l[o + 2]);
      l[o + 3] = mac<kFused>(v.w, k.v[4 * i + 3], l[o + 3]);
    }
    const float dot = __fadd_rn(__fadd_rn(__fadd_rn(l[0], l[1]), __fadd_rn(l[2], l[3])),
                                __fadd_rn(__fadd_rn(l[4], l[5]), __fadd_rn(l[6], l[7])));
    const float s = round_bf16(dot);
    total = __fadd_rn(total, round_bf16(__fmul_rn(s < 0.0f ? 0.0f : s, w[h])));  // std::max(s, 0): NaN stays
  }
  return total;
}

// q of token t into shared fp32 (q[heads·128], then w[heads]); returns min nonzero |q| and max |q|.
__device__ float2 load_query(const IndexerArgs& a, int64_t t, float* q, float* w) {
  __shared__ float2 part[kScoreThreads / kWarp];
  const uint4* src = reinterpret_cast<const uint4*>(a.q + t * a.heads * kDim);
  float lo = INFINITY, hi = 0.0f;
  for (int i = threadIdx.x; i < a.heads * kDim / 8; i += blockDim.x) {
    const uint4 v = src[i];
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
    float f[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      f[j] = __uint_as_float(j % 2 ? words[j / 2] & 0xffff0000u : words[j / 2] << 16);
      const float m = fabsf(f[j]);
      hi = fmaxf(hi, m);
      if (m != 0.0f) lo = fminf(lo, m);
    }
    reinterpret_cast<float4*>(q)[2 * i] = make_float4(f[0], f[1], f[2], f[3]);
    reinterpret_cast<float4*>(q)[2 * i + 1] = make_float4(f[4], f[5], f[6], f[7]);
  }
  for (int h = threadIdx.x; h < a.heads; h += blockDim.x)
    w[h] = round_bf16(__fmul_rn(bf16_to_f(a.weights[t * a.heads + h]), a.weight_scale));
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

// Grid (key tiles of 128, tokens of the group): scores[t − t0][j] for the token's eligible keys, and
// hist[t − t0][b]: how many of them have key b (wide: 65536 bins) or high key byte b (256 bins), for the
// select kernel's radix select.
// Products q_i·k_i of a bf16 q and a key of <= 16 significant bits are exact unless they leave the
// normal range, so where the bounds rule that out a key takes the fma path (half the instructions).
template <EntryFormat F>
__global__ void __launch_bounds__(kScoreThreads, 3)
    score_kernel(IndexerArgs a, int64_t t0, int64_t cap, int64_t stride, float* scores, uint32_t* hist, bool wide) {
  extern __shared__ float4 smem[];
  float* q = reinterpret_cast<float*>(smem);
  float* w = q + a.heads * kDim;
  const int64_t t = t0 + blockIdx.y;
  int64_t seq;
  const int64_t n = eligible_keys(a, t, cap, &seq);
  const int64_t j = int64_t{blockIdx.x} * kScoreThreads + threadIdx.x;
  if (int64_t{blockIdx.x} * kScoreThreads >= n) return;  // the whole CTA
  const float2 qr = load_query(a, t, q, w);
  const bool live = j < n;
  float score = -INFINITY;
  if (live) {
    const int32_t slot = a.key_slots[seq * a.key_stride + j];
    if (!a.keys.holds(slot)) {
      report(a.err, DeviceError::kIndexerSlot);
    } else {
      Key k;
      decode_key<F>(a.keys.entry(slot), k);
      const bool fused =
          k.short_mantissa && __fmul_rn(qr.x, k.min_nonzero) >= 0x1p-126f && __fmul_rn(qr.y, k.max_abs) <= 0x1p126f;
      score = round_bf16(fused ? head_sum<true>(q, w, a.heads, k) : head_sum<false>(q, w, a.heads, k));
      score = isnan(score) ? -INFINITY : __fadd_rn(score, 0.0f);  // NaN ranks last; −0 → +0 (a tie on the CPU)
    }
    scores[(t - t0) * stride + j] = score;
  }
  // Integer counts, aggregated per warp (scores mostly share their high byte): the order is immaterial.
  const uint32_t bin = live ? (wide ? score_key(score) : score_key(score) >> 8) : ~0u;
  const uint32_t peers = __match_any_sync(0xffffffffu, bin);
  if (live && threadIdx.x % kWarp == static_cast<unsigned>(__ffs(peers) - 1))
    atomicAdd(&hist[(t - t0) * (wide ? kWideBins : 256) + bin], static_cast<uint32_t>(__popc(peers)));
}

// ---- top-k selection -------------------------------------------------------------------------------

// Exclusive prefix sum of one value per warp, in warp order; *total gets the block's sum.
__device__ int warp_exclusive_sum(int v, int* total) {
  __shared__ int warp_sums[kSelectThreads / kWarp];
  const int warp = threadIdx.x / kWarp;
  if (threadIdx.x % kWarp == 0) warp_sums[warp] = v;
  __syncthreads();
  int before = 0, sum = 0;
  for (int i = 0; i < kSelectThreads / kWarp; ++i) {
    before += i < warp ? warp_sums[i] : 0;
    sum += warp_sums[i];
  }
  __syncthreads();
  *total = sum;
  return before;
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

// By one warp: the digit d at which the counts hist[255], hist[254], ... (from the top) reach `want`;
// *digit = d, *left = want − (count above d). Lane l owns digits 255 − 8l down to 248 − 8l.
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

// By the whole block: the key at which the counts of the wide histogram, from the top, reach `want`;
// *key and *left as pick_digit. Thread i sums keys [65408 − 128i, 65536 − 128i) with its loads in flight
// together; the one whose range holds the crossing has it searched in shared memory.
__device__ void pick_key_wide(const uint32_t* hist, int want, uint32_t* key, int* left) {
  constexpr int kPer = kWideBins / kSelectThreads;
  __shared__ uint32_t chunk[kPer];
  __shared__ int cross_thread, cross_above;
  const int lane = threadIdx.x % kWarp;
  const uint4* src = reinterpret_cast<const uint4*>(hist + kWideBins - kPer * (threadIdx.x + 1));
  int own = 0;
#pragma unroll
  for (int v = 0; v < kPer / 4; ++v) {
    const uint4 c = src[v];
    own += static_cast<int>(c.x + c.y + c.z + c.w);
  }
  int incl = own;
  for (int o = 1; o < kWarp; o <<= 1) {
    const int x = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += x;
  }
  int block_total;
  incl += warp_exclusive_sum(__shfl_sync(0xffffffffu, incl, kWarp - 1), &block_total);
  if (incl - own < want && want <= incl) {
    cross_thread = static_cast<int>(threadIdx.x);
    cross_above = incl - own;
  }
  __syncthreads();
  const int first = kWideBins - kPer * (cross_thread + 1);
  if (threadIdx.x < kPer) chunk[threadIdx.x] = hist[first + threadIdx.x];
  __syncthreads();
  if (threadIdx.x == 0) {
    int above = cross_above;
    for (int d = kPer - 1; d >= 0; --d) {
      const int c = static_cast<int>(chunk[d]);
      if (above + c >= want) {
        *key = static_cast<uint32_t>(first + d);
        *left = want - above;
        break;
      }
      above += c;
    }
  }
  __syncthreads();
}

// Radix select of the `want`-th largest score_key among row[0, n): from the scoring kernel's wide
// histogram directly, or the high digit from its byte histogram and the low digit from one pass over the
// row. Returns the key; *ties gets how many elements equal to it belong to the top `want`.
__device__ uint32_t radix_threshold(const float* row, int64_t n, int want, const uint32_t* score_hist, bool wide,
                                    int* ties) {
  __shared__ uint32_t hist[256];
  __shared__ uint32_t digit;
  __shared__ int left;
  if (wide) {
    pick_key_wide(score_hist, want, &digit, &left);
    *ties = left;
    return digit;
  }
  const uint32_t* high_hist = score_hist;
  if (threadIdx.x < kWarp) pick_digit(high_hist, want, &digit, &left);
  for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
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
  *ties = left;
  return high << 8 | digit;
}

// The selected (key, index) pairs into keys[0, kk): keys above the threshold and the first `ties` keys
// equal to it in index order (all of row[0, n) when `all`). Sort keys are key << 32 | ~j: unique, so
// the order is strict, and lower j ranks first among equal scores.
__device__ void gather_selected(const float* row, int64_t n, bool all, uint32_t threshold, int ties, uint64_t* keys) {
  __shared__ int taken;
  if (threadIdx.x == 0) taken = 0;
  __syncthreads();
  const int lane = threadIdx.x % kWarp;
  int ties_before = 0;
  for (int64_t base = 0; base < n; base += int64_t{blockDim.x} * kVec) {
    uint32_t k[kVec];
    load_keys(row, n, base, k);
    // Ties before each of this lane's vectors, in index order: vectors v-major, then lanes, then warps.
    int rank[kVec / 4];
    int in_warp = 0;
#pragma unroll
    for (int v = 0; v < kVec / 4; ++v) {
      int mine = 0;
      for (int e = 0; e < 4; ++e) mine += !all && tile_index(base, v, e) < n && k[4 * v + e] == threshold;
      int incl = mine;
      for (int o = 1; o < kWarp; o <<= 1) {
        const int x = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += x;
      }
      rank[v] = in_warp + incl - mine;
      in_warp += __shfl_sync(0xffffffffu, incl, kWarp - 1);
    }
    int tile_ties;
    const int before = ties_before + warp_exclusive_sum(in_warp, &tile_ties);
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const int64_t j = tile_index(base, i / 4, i % 4);
      if (j >= n) continue;
      const bool tie = !all && k[i] == threshold;
      if (all || k[i] > threshold || (tie && before + rank[i / 4] < ties)) {
        const int at = atomicAdd(&taken, 1);
        if (at < kMaxTopk) keys[at] = (uint64_t{k[i]} << 32) | (0xffffffffu - static_cast<uint32_t>(j));
      }
      rank[i / 4] += tie;
    }
    ties_before += tile_ties;
  }
  __syncthreads();
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

// One CTA per token of the group: the threshold by radix select, the selection, a sort, the output rows.
__global__ void __launch_bounds__(kSelectThreads) select_kernel(IndexerArgs a, int64_t t0, int64_t cap, int64_t stride,
                                                                const float* scores, const uint32_t* hist, bool wide) {
  __shared__ uint64_t keys[kMaxTopk];
  const int64_t t = t0 + blockIdx.x;
  int64_t seq;
  const int64_t n = eligible_keys(a, t, cap, &seq);
  const int kk = static_cast<int>(n < a.topk ? n : int64_t{a.topk});
  const float* row = scores + (t - t0) * stride;
  const bool all = n <= a.topk;
  int ties = 0;
  const uint32_t threshold =
      all ? 0u : radix_threshold(row, n, kk, hist + (t - t0) * (wide ? kWideBins : 256), wide, &ties);
  gather_selected(row, n, all, threshold, ties, keys);
  int size = 1;
  while (size < kk) size *= 2;
  for (int i = kk + threadIdx.x; i < size; i += blockDim.x) keys[i] = 0;  // below every real key
  __syncthreads();
  sort_descending(keys, size);
  for (int r = threadIdx.x; r < a.topk; r += blockDim.x) {
    const int32_t j = r < kk ? static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(keys[r])) : -1;
    a.out_index[t * a.topk + r] = j;
    if (a.out_slots) a.out_slots[t * a.topk + r] = j >= 0 ? a.slot_map[seq * a.key_stride + j] : -1;
  }
}

int64_t key_entry_bytes(EntryFormat f) {
  switch (f) {
    case EntryFormat::kIndexFp4:
      return kDim / 2 + kDim / 32;
    case EntryFormat::kIndexFp8:
      return kDim + 4;
    case EntryFormat::kBf16:
      return 2 * kDim;
    default:
      return 0;
  }
}

template <EntryFormat F>
void launch_scores(const IndexerArgs& a, int64_t t0, int64_t group, int64_t cap, int64_t stride, float* scores,
                   uint32_t* hist, bool wide, cudaStream_t stream) {
  const size_t smem = static_cast<size_t>(a.heads) * (kDim + 1) * sizeof(float);
  if (smem > 48 * 1024)
    DSV4_CUDA_CHECK(
        cudaFuncSetAttribute(score_kernel<F>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>((cap + kScoreThreads - 1) / kScoreThreads), static_cast<unsigned>(group));
  score_kernel<F><<<grid, kScoreThreads, smem, stream>>>(a, t0, cap, stride, scores, hist, wide);
  DSV4_CUDA_CHECK_LAUNCH();
}

}  // namespace

void indexer_topk(const IndexerArgs& a, cudaStream_t stream) {
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
  if (a.tokens == 0) return;
  // Per token group: scores [group, stride] fp32 (rows padded to whole 16-byte vectors) and histograms
  // [group, bins]. Long rows of few tokens (decode at long context: few select CTAs) take wide histograms,
  // which leave the select kernel a single pass over the row.
  const int64_t cap = a.max_keys > 0 ? std::min<int64_t>(a.key_stride, a.max_keys) : a.key_stride;
  const int64_t stride = (cap + 3) / 4 * 4;
  const int64_t group =
      cap == 0 ? a.tokens : std::clamp<int64_t>(kScoreBudget / stride, 1, std::min<int64_t>(a.tokens, 65535));
  const bool wide = group <= kWideTokens && stride >= kWideRow;
  const int64_t bins = wide ? kWideBins : 256;
  float* scores = nullptr;
  uint32_t* hist = nullptr;
  if (cap > 0) {
    DSV4_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&scores), group * stride * sizeof(float), stream));
    DSV4_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&hist), group * bins * sizeof(uint32_t), stream));
  }
  for (int64_t t0 = 0; t0 < a.tokens; t0 += group) {
    const int64_t g = std::min(group, a.tokens - t0);
    if (cap > 0) {
      DSV4_CUDA_CHECK(cudaMemsetAsync(hist, 0, g * bins * sizeof(uint32_t), stream));
      switch (a.keys.format) {
        case EntryFormat::kIndexFp4:
          launch_scores<EntryFormat::kIndexFp4>(a, t0, g, cap, stride, scores, hist, wide, stream);
          break;
        case EntryFormat::kIndexFp8:
          launch_scores<EntryFormat::kIndexFp8>(a, t0, g, cap, stride, scores, hist, wide, stream);
          break;
        default:
          launch_scores<EntryFormat::kBf16>(a, t0, g, cap, stride, scores, hist, wide, stream);
          break;
      }
    }
    select_kernel<<<static_cast<unsigned>(g), kSelectThreads, 0, stream>>>(a, t0, cap, stride, scores, hist, wide);
    DSV4_CUDA_CHECK_LAUNCH();
  }
  if (scores) DSV4_CUDA_CHECK(cudaFreeAsync(scores, stream));
  if (hist) DSV4_CUDA_CHECK(cudaFreeAsync(hist, stream));
}

}  // namespace dsv4::cuda
