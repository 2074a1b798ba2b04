// The sample op's kernel (backend/op_params.h SampleParams): one CTA per row. In turn: each edited id's
// edits once (values kept by edit index, ids flagged in a shared bitmap); the first maximum; the
// candidates as a shared bitmap S with their count and mass; top-k and then top-p as radix selections
// over the weights' bits narrowing S; the draw from per-word masses; the raw logprobs. Weights are
// recomputed per pass instead of stored (no per-row scratch of the vocabulary's size). Every sum that
// picks a token is an integer sum and every atomic an integer one, so the order of neither matters.
#include <climits>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/sampling.h"

namespace dsv4::cuda {
namespace {

namespace sm = dsv4::sampling;

constexpr int kThreads = 512;
constexpr int kLanes = 32;
constexpr int kWarps = kThreads / kLanes;
constexpr unsigned kAll = 0xffffffffu;
constexpr int kDigitBits = 10;  // radix digits: 1024 buckets
constexpr int kBuckets = 1 << kDigitBits;
constexpr int kWeightKeyBits = 62;  // weights lie in (0, 1]: their top two bits are 0
constexpr int kRawKeyBits = 32;
constexpr int kMaxLevels = (kWeightKeyBits + kDigitBits - 1) / kDigitBits;

using u64 = unsigned long long;

// The sample op as its kernel gets it: row and edits point at their device copies.
struct SampleLaunch : SampleParams {
  double* edited = nullptr;
  uint64_t* word_mass = nullptr;
  const uint32_t* allow_sets = nullptr;  // p.allow's sets copied into one device array, row k at k * nwords
};

// Block-wide scratch and the values every thread of a row needs.
struct Shared {
  u64 hist[kBuckets];
  u64 warp_u64[kWarps];
  double warp_f64[kWarps];
  int64_t warp_i64[kWarps];
  int chosen[kMaxLevels];  // the radix digits picked so far
  u64 above;               // measure of the elements already decided in
  u64 ties;                // how many of the elements at the exact cut key to keep
  u64 word;                // the draw: the word holding the crossing
  u64 target;              // the draw's target mass
  int64_t nth;             // nth_set's answer
  int64_t token;
  int32_t top[kSampleMaxLogprobs];
};

// The row: edited logits on demand. Edited ids are flagged in a bitmap; their values sit at the first
// edit of their run (ids ascend), found by binary search. Ids outside the row's allow-set are −inf.
struct RowView {
  const float* x;
  const SampleEdit* edits;
  const double* edited;
  const uint32_t* edit_bits;
  int32_t edit_begin, edit_end;
  const uint32_t* allow;  // null: every id

  __device__ double z(int64_t i) const {
    if (allow != nullptr && !allows(allow, i)) return -sm::infinity();
    if (!((edit_bits[i >> 5] >> (i & 31)) & 1u)) return sm::no_nan(x[i]);
    int32_t lo = edit_begin, hi = edit_end;
    while (lo < hi) {
      const int32_t mid = lo + (hi - lo) / 2;
      if (edits[mid].id < i) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    return sm::no_nan(edited[lo]);
  }
  __device__ double raw(int64_t i) const { return sm::no_nan(x[i]); }
};

__device__ __forceinline__ int lane_id() { return static_cast<int>(threadIdx.x) % kLanes; }
__device__ __forceinline__ int warp_id() { return static_cast<int>(threadIdx.x) / kLanes; }

__device__ __forceinline__ u64 warp_sum(u64 v) {
  for (int o = kLanes / 2; o > 0; o >>= 1) v += __shfl_xor_sync(kAll, v, o);
  return v;
}

// Integer sums: any order gives the same total, in every thread.
__device__ u64 block_sum(u64 v, Shared& sh) {
  v = warp_sum(v);
  if (lane_id() == 0) sh.warp_u64[warp_id()] = v;
  __syncthreads();
  u64 t = 0;
  for (int w = 0; w < kWarps; ++w) t += sh.warp_u64[w];
  __syncthreads();
  return t;
}

// fp64 sum in one fixed tree (a butterfly leaves the same value in every lane), in every thread.
__device__ double block_sum(double v, Shared& sh) {
  for (int o = kLanes / 2; o > 0; o >>= 1) v = __dadd_rn(v, __shfl_xor_sync(kAll, v, o));
  if (lane_id() == 0) sh.warp_f64[warp_id()] = v;
  __syncthreads();
  double t = 0;
  for (int w = 0; w < kWarps; ++w) t = __dadd_rn(t, sh.warp_f64[w]);
  __syncthreads();
  return t;
}

// Exclusive prefix of v over the threads in order.
__device__ u64 block_exclusive_scan(u64 v, Shared& sh) {
  u64 incl = v;
  for (int o = 1; o < kLanes; o <<= 1) {
    const u64 n = __shfl_up_sync(kAll, incl, o);
    if (lane_id() >= o) incl += n;
  }
  if (lane_id() == kLanes - 1) sh.warp_u64[warp_id()] = incl;
  __syncthreads();
  u64 before = 0;
  for (int w = 0; w < warp_id(); ++w) before += sh.warp_u64[w];
  __syncthreads();
  return before + incl - v;
}

// (v, i) beats (bv, bi): a larger value, or an equal one at a lower index (no NaN here).
__device__ __forceinline__ void keep_first_max(double v, int64_t i, double& bv, int64_t& bi) {
  if (v > bv || (v == bv && i < bi)) {
    bv = v;
    bi = i;
  }
}

// The first maximum over the block, in every thread (a strict order: any reduction order agrees).
__device__ void block_first_max(double& bv, int64_t& bi, Shared& sh) {
  for (int o = kLanes / 2; o > 0; o >>= 1)
    keep_first_max(__shfl_xor_sync(kAll, bv, o), __shfl_xor_sync(kAll, bi, o), bv, bi);
  if (lane_id() == 0) {
    sh.warp_f64[warp_id()] = bv;
    sh.warp_i64[warp_id()] = bi;
  }
  __syncthreads();
  for (int w = 0; w < kWarps; ++w) keep_first_max(sh.warp_f64[w], sh.warp_i64[w], bv, bi);
  __syncthreads();
}

// The id of the n-th set bit (1-based, ascending ids) of a bitmap, in every thread.
__device__ int64_t nth_set(const uint32_t* bits, int nwords, u64 n, Shared& sh) {
  const int per = (nwords + kThreads - 1) / kThreads;
  const int w0 = min(nwords, static_cast<int>(threadIdx.x) * per), w1 = min(nwords, w0 + per);
  u64 count = 0;
  for (int w = w0; w < w1; ++w) count += static_cast<u64>(__popc(bits[w]));
  const u64 before = block_exclusive_scan(count, sh);
  if (before < n && n <= before + count) {
    u64 seen = before;
    for (int w = w0; w < w1; ++w) {
      uint32_t b = bits[w];
      const auto pc = static_cast<u64>(__popc(b));
      if (seen + pc >= n) {
        for (u64 j = seen + 1; j < n; ++j) b &= b - 1;  // drop the lower set bits
        sh.nth = int64_t{32} * w + (__ffs(static_cast<int>(b)) - 1);
        break;
      }
      seen += pc;
    }
  }
  __syncthreads();
  const int64_t r = sh.nth;
  __syncthreads();
  return r;
}

__device__ __forceinline__ int digit_lo(int key_bits, int d) { return max(0, key_bits - kDigitBits * (d + 1)); }
__device__ __forceinline__ int digit(uint64_t key, int key_bits, int d) {
  const int lo = digit_lo(key_bits, d), width = key_bits - kDigitBits * d - lo;
  return static_cast<int>((key >> lo) & ((uint64_t{1} << width) - 1));
}

// Warp 0: the bucket (from the highest) where the running measure first reaches `need`.
__device__ void choose_bucket(int d, u64 need, Shared& sh) {
  constexpr int kPer = kBuckets / kLanes;
  const int lane = lane_id(), top = kBuckets - 1 - lane * kPer;
  u64 local = 0;
  for (int j = 0; j < kPer; ++j) local += sh.hist[top - j];
  u64 incl = local;
  for (int o = 1; o < kLanes; o <<= 1) {
    const u64 n = __shfl_up_sync(kAll, incl, o);
    if (lane >= o) incl += n;
  }
  const u64 before = sh.above + incl - local;
  const unsigned reach = __ballot_sync(kAll, before + local >= need);
  if (lane != __ffs(static_cast<int>(reach)) - 1) return;
  u64 c = before;
  for (int j = 0; j < kPer; ++j) {
    const u64 h = sh.hist[top - j];
    if (c + h >= need) {
      sh.chosen[d] = top - j;
      sh.above = c;
      return;
    }
    c += h;
  }
}

// Narrows the set S to its heaviest-first prefix (keys descending, equal keys by ascending id) whose
// measure (1 per element, or the weight's mass when kMass) first reaches `need` (1 <= need <=
// measure(S)). A radix select over the keys' digits, highest first, on a live bitmap L: each pass
// drops from L (and from S when lighter) what the previous digit decided, then histograms the next
// digit; finally the elements at the exact cut key (equal measures) are kept up to the needed count by
// ascending id. Histograms are integer sums, so the order of their atomics changes nothing.
template <bool kMass, typename KeyOf>
__device__ void select(uint32_t* S, uint32_t* L, int nwords, int key_bits, u64 need, KeyOf key_of, Shared& sh) {
  const int lane = lane_id();
  for (int w = static_cast<int>(threadIdx.x); w < nwords; w += kThreads) L[w] = S[w];
  if (threadIdx.x == 0) sh.above = 0;
  const int levels = (key_bits + kDigitBits - 1) / kDigitBits;
  for (int d = 0; d <= levels; ++d) {
    for (int b = static_cast<int>(threadIdx.x); b < kBuckets; b += kThreads) sh.hist[b] = 0;
    __syncthreads();
    for (int w = warp_id(); w < nwords; w += kWarps) {
      const uint32_t live = L[w];
      if (live == 0) continue;  // the same word for the whole warp
      bool keep = false, drop = false;
      if ((live >> lane) & 1u) {
        const uint64_t key = key_of(int64_t{32} * w + lane);
        keep = true;
        if (d > 0) {
          const int prev = digit(key, key_bits, d - 1);
          keep = prev == sh.chosen[d - 1];
          drop = prev < sh.chosen[d - 1];
        }
        if (keep && d < levels)
          atomicAdd(&sh.hist[digit(key, key_bits, d)], kMass ? static_cast<u64>(sm::mass(sm::from_bits(key))) : 1ull);
      }
      const uint32_t kept = __ballot_sync(kAll, keep), dropped = __ballot_sync(kAll, drop);
      if (lane == 0) {
        L[w] = kept;
        S[w] &= ~dropped;
      }
    }
    __syncthreads();
    if (d == levels) break;
    if (warp_id() == 0) choose_bucket(d, need, sh);
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    uint64_t key = 0;
    for (int d = 0; d < levels; ++d) key |= static_cast<uint64_t>(sh.chosen[d]) << digit_lo(key_bits, d);
    const u64 each = kMass ? max(static_cast<u64>(sm::mass(sm::from_bits(key))), 1ull) : 1ull;
    sh.ties = (need - sh.above + each - 1) / each;
  }
  __syncthreads();
  const int64_t cut = nth_set(L, nwords, sh.ties, sh);
  for (int w = static_cast<int>(threadIdx.x); w < nwords; w += kThreads) {
    const int64_t t = cut - int64_t{32} * w;  // bits above t are ids past the cut
    const uint32_t past = t < 0 ? kAll : (t >= 31 ? 0u : kAll << (t + 1));
    S[w] &= ~(L[w] & past);
  }
  __syncthreads();
}

// The lowest id of S whose running mass (ids ascending) exceeds the target: each warp sums a
// contiguous run of words (keeping every word's mass), then the crossing word is found from the sums
// and only it is weighed again.
__device__ int64_t draw(const RowView& v, const uint32_t* S, int nwords, double zmax, const SampleRow& row,
                        uint64_t* word_mass, int64_t best, Shared& sh) {
  const int lane = lane_id();
  const int per = (nwords + kWarps - 1) / kWarps;
  const int w0 = min(nwords, warp_id() * per), w1 = min(nwords, w0 + per);
  const auto mass_at = [&](int w) -> u64 {
    if (!((S[w] >> lane) & 1u)) return 0;
    return sm::mass(sm::weight(v.z(int64_t{32} * w + lane), zmax, row.temperature));
  };
  u64 acc = 0;
  for (int w = w0; w < w1; ++w) {
    const u64 m = S[w] ? warp_sum(mass_at(w)) : 0;
    if (lane == 0) word_mass[w] = m;
    acc += m;
  }
  if (lane == 0) sh.warp_u64[warp_id()] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    u64 total = 0;
    for (int g = 0; g < kWarps; ++g) total += sh.warp_u64[g];
    const u64 target = sm::draw_target(row.u, total);
    u64 c = 0;
    int g = 0;
    while (g < kWarps && c + sh.warp_u64[g] <= target) c += sh.warp_u64[g++];
    int w = min(nwords, g * per);
    while (w < nwords && c + word_mass[w] <= target) c += word_mass[w++];
    sh.word = static_cast<u64>(w);
    sh.above = c;
    sh.target = target;
    sh.token = best;  // not reached: the maximum (mass 2^44) always survives and target < total
  }
  __syncthreads();
  if (warp_id() == 0 && sh.word < static_cast<u64>(nwords)) {
    const int w = static_cast<int>(sh.word);
    const u64 m = mass_at(w);
    u64 incl = m;
    for (int o = 1; o < kLanes; o <<= 1) {
      const u64 n = __shfl_up_sync(kAll, incl, o);
      if (lane >= o) incl += n;
    }
    const unsigned over = __ballot_sync(kAll, sh.above + incl > sh.target);
    if (over != 0 && lane == 0) sh.token = int64_t{32} * w + (__ffs(static_cast<int>(over)) - 1);
  }
  __syncthreads();
  return sh.token;
}

// The raw log-softmax: the chosen id's value and rank (with a.rank), and the n most likely ids (ties to the
// lower id), sorted.
__device__ void raw_logprobs(const RowView& v, int64_t limit, uint32_t* S, uint32_t* L, int nwords, double m,
                             int64_t token, int32_t n, double& logprob, int64_t r, const SampleLaunch& a, Shared& sh) {
  double part = 0;
  for (int64_t i = threadIdx.x; i < limit; i += kThreads) part = __dadd_rn(part, sm::exp(sm::sub(v.raw(i), m)));
  const double lse = __dadd_rn(m, log(block_sum(part, sh)));
  logprob = __dsub_rn(v.raw(token), lse);
  if (a.rank) {  // 1 + the ids whose raw key is above the token's (the CPU's count)
    const uint32_t key = sm::raw_key(v.x[token]);
    u64 above = 0;
    for (int64_t i = threadIdx.x; i < limit; i += kThreads) above += sm::raw_key(v.x[i]) > key;
    above = block_sum(above, sh);
    if (threadIdx.x == 0) a.rank[r] = static_cast<int64_t>(above) + 1;
  }
  const int32_t k = n < limit ? n : static_cast<int32_t>(limit);
  if (k > 0) {
    for (int w = static_cast<int>(threadIdx.x); w < nwords; w += kThreads) {
      const int64_t left = limit - int64_t{32} * w;
      S[w] = left >= 32 ? kAll : (kAll >> (32 - left));
    }
    __syncthreads();
    const auto raw_key = [&](int64_t i) -> uint64_t { return sm::raw_key(v.x[i]); };
    select<false>(S, L, nwords, kRawKeyBits, static_cast<u64>(k), raw_key, sh);
    // Gather the k ids in ascending order, then sort them most likely first.
    const int per = (nwords + kThreads - 1) / kThreads;
    const int w0 = min(nwords, static_cast<int>(threadIdx.x) * per), w1 = min(nwords, w0 + per);
    u64 count = 0;
    for (int w = w0; w < w1; ++w) count += static_cast<u64>(__popc(S[w]));
    u64 at = block_exclusive_scan(count, sh);
    for (int w = w0; w < w1 && count > 0; ++w) {
      for (uint32_t b = S[w]; b != 0; b &= b - 1) sh.top[at++] = 32 * w + (__ffs(static_cast<int>(b)) - 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int j = 1; j < k; ++j) {
        const int32_t id = sh.top[j];
        const uint32_t key = sm::raw_key(v.x[id]);
        int q = j;
        for (; q > 0 && sm::raw_key(v.x[sh.top[q - 1]]) < key; --q) sh.top[q] = sh.top[q - 1];
        sh.top[q] = id;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x < static_cast<unsigned>(a.top_width)) {
    const int j = static_cast<int>(threadIdx.x);
    const bool has = j < k;
    a.top_id[r * a.top_width + j] = has ? sh.top[j] : -1;
    a.top_logprob[r * a.top_width + j] = has ? __dsub_rn(v.raw(sh.top[j]), lse) : 0.0;
  }
}

__global__ void __launch_bounds__(kThreads) sample_kernel(SampleLaunch a, int nwords) {
  pdl_enter();
  extern __shared__ uint32_t bitmaps[];  // edited ids, the surviving set S, the live set L
  __shared__ Shared sh;
  uint32_t *E = bitmaps, *S = bitmaps + nwords, *L = bitmaps + 2 * nwords;
  const int64_t r = blockIdx.x;
  const SampleRow row = a.row[r];
  const int64_t limit = a.limit;
  const uint32_t* allow = row.allow_row >= 0 ? a.allow_sets + static_cast<int64_t>(row.allow_row) * nwords : nullptr;
  const RowView v{a.x + r * a.cols, a.edits, a.edited, E, row.edit_begin, row.edit_end, allow};

  // Each id's edits in list order, once, by the thread that meets its first edit.
  for (int w = static_cast<int>(threadIdx.x); w < nwords; w += kThreads) E[w] = 0;
  __syncthreads();
  for (int32_t e = row.edit_begin + static_cast<int32_t>(threadIdx.x); e < row.edit_end; e += kThreads) {
    const int32_t id = a.edits[e].id;
    if (e > row.edit_begin && a.edits[e - 1].id == id) continue;
    double z = v.x[id];
    for (int32_t f = e; f < row.edit_end && a.edits[f].id == id; ++f) z = sm::apply_edit(z, a.edits[f]);
    a.edited[e] = z;
    atomicOr(&E[id >> 5], 1u << (id & 31));
  }
  __syncthreads();

  double zmax = -sm::infinity(), m = -sm::infinity();
  int64_t best = limit;
  for (int64_t i = threadIdx.x; i < limit; i += kThreads) {
    keep_first_max(v.z(i), i, zmax, best);
    m = fmax(m, v.raw(i));
  }
  block_first_max(zmax, best, sh);
  for (int o = kLanes / 2; o > 0; o >>= 1) m = fmax(m, __shfl_xor_sync(kAll, m, o));
  if (lane_id() == 0) sh.warp_f64[warp_id()] = m;
  __syncthreads();
  for (int w = 0; w < kWarps; ++w) m = fmax(m, sh.warp_f64[w]);
  __syncthreads();

  int64_t token = row.force_id >= 0 ? row.force_id : best;  // a scored token has nothing to draw
  if (row.force_id < 0 && row.temperature > 0 && zmax != -sm::infinity()) {
    // Candidates: w > 0 and w >= min_p.
    u64 count = 0, total = 0;
    for (int w = warp_id(); w < nwords; w += kWarps) {
      const int64_t i = int64_t{32} * w + lane_id();
      bool cand = false;
      if (i < limit) {
        const double wt = sm::weight(v.z(i), zmax, row.temperature);
        cand = wt > 0 && wt >= row.min_p;
        if (cand) total += sm::mass(wt);
      }
      const uint32_t bits = __ballot_sync(kAll, cand);
      if (lane_id() == 0) {
        S[w] = bits;
        count += static_cast<u64>(__popc(bits));
      }
    }
    count = block_sum(count, sh);
    total = block_sum(total, sh);
    const auto weight_key = [&](int64_t i) -> uint64_t {
      return sm::bits_of(sm::weight(v.z(i), zmax, row.temperature));
    };
    if (row.top_k > 0 && count > static_cast<u64>(row.top_k)) {
      select<false>(S, L, nwords, kWeightKeyBits, static_cast<u64>(row.top_k), weight_key, sh);
      u64 kept = 0;
      for (int w = static_cast<int>(threadIdx.x); w < nwords; w += kThreads) {
        for (uint32_t b = S[w]; b != 0; b &= b - 1)
          kept += sm::mass(sm::from_bits(weight_key(int64_t{32} * w + (__ffs(static_cast<int>(b)) - 1))));
      }
      total = block_sum(kept, sh);
    }
    if (row.top_p < 1) select<true>(S, L, nwords, kWeightKeyBits, sm::top_p_need(row.top_p, total), weight_key, sh);
    token = draw(v, S, nwords, zmax, row, a.word_mass + r * nwords, best, sh);
  }

  double logprob = 0;
  if (row.logprobs >= 0) {
    raw_logprobs(v, limit, S, L, nwords, m, token, row.logprobs, logprob, r, a, sh);
  } else {
    if (threadIdx.x < static_cast<unsigned>(a.top_width)) {
      a.top_id[r * a.top_width + threadIdx.x] = -1;
      a.top_logprob[r * a.top_width + threadIdx.x] = 0.0;
    }
    if (a.rank && threadIdx.x == 0) a.rank[r] = 0;
  }
  if (threadIdx.x == 0) {
    a.token[r] = static_cast<int32_t>(token);
    if (a.logprob) a.logprob[r] = logprob;
  }
}

}  // namespace

void sample(const SampleParams& p, const SampleDeviceArrays& d, cudaStream_t stream) {
  if (p.rows == 0) return;
  SampleLaunch a{p, d.edited, d.word_mass, d.allow};
  a.row = d.row;  // the host arrays' device copies in their place
  a.edits = d.edits;
  a.allow = nullptr;  // host pointers: the kernel reads allow_sets
  DSV4_CUDA_REQUIRE(a.limit >= 1 && a.limit <= a.cols && a.limit <= kSampleMaxLimit, "sample: limit out of range");
  DSV4_CUDA_REQUIRE(a.rows <= INT_MAX, "sample: too many rows");
  DSV4_CUDA_REQUIRE(a.top_width >= 0 && a.top_width <= kSampleMaxLogprobs, "sample: top_width out of range");
  const int nwords = static_cast<int>((a.limit + 31) / 32);
  const size_t smem = size_t{3} * static_cast<size_t>(nwords) * sizeof(uint32_t);
  allow_dynamic_smem(sample_kernel, smem);  // the default 48 KB covers static and dynamic together
  launch_kernel(sample_kernel, static_cast<unsigned>(a.rows), kThreads, smem, stream, a, nwords);
}

}  // namespace dsv4::cuda
