#include <algorithm>

#include "backend/cuda/attention.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/glibc_expf.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/row_kernels.h"

namespace dsv4::cuda {
namespace {

constexpr int kBlock = 64;  // index block of the reference kernel

// One warp per 64-element nope block (and the warp of block 0 also copies the rope part).
__global__ void store_fp8_kernel(const uint16_t* x, int64_t rows, int d, int r, EntryTable t, const int32_t* slots,
                                 int32_t* err) {
  pdl_enter();
  const int n = d - r, blocks = n / 64;
  const int64_t w = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (w >= rows * blocks) return;
  const int64_t row = w / blocks;
  const int b = static_cast<int>(w % blocks);
  const int32_t slot = slots[row];
  if (slot < 0) return;
  if (!t.holds(slot)) return report(err, DeviceError::kStoreSlot);
  uint8_t* e = t.entry(slot);
  const uint16_t* src = x + row * d;
  float v[2];
  float amax = 0;
  for (int i = 0; i < 2; ++i) {
    v[i] = bf16_to_f(src[b * 64 + lane * 2 + i]);
    amax = fmaxf(amax, fabsf(v[i]));
  }
  for (int o = kWarp / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const uint8_t eb = ceil_pow2_e8(fmaxf(amax, 1e-4f) * (1.0f / 448.0f));
  const float inv = pow2_inverse(e8_value(eb));
  for (int i = 0; i < 2; ++i) e[b * 64 + lane * 2 + i] = static_cast<uint8_t>(act_code(v[i], inv));
  if (lane == 0) e[n + 2 * r + b] = eb;
  if (b == 0) {
    uint16_t* rope = reinterpret_cast<uint16_t*>(e + n);
    for (int i = lane; i < r; i += kWarp) rope[i] = src[n + i];
    const int used = n + 2 * r + blocks;
    for (int i = used + lane; i < t.entry_bytes; i += kWarp) e[i] = 0;
  }
}

// Plain formats: bf16 copies, fp32 widens.
__global__ void store_plain_kernel(const uint16_t* x, int64_t rows, int d, EntryTable t, const int32_t* slots,
                                   int32_t* err) {
  pdl_enter();
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= rows * d) return;
  const int32_t slot = slots[i / d];
  if (slot < 0) return;
  if (!t.holds(slot)) return report(err, DeviceError::kStoreSlot);
  if (t.format == KvEntryFormat::kF32) {
    reinterpret_cast<float*>(t.entry(slot))[i % d] = bf16_to_f(x[i]);
  } else {
    reinterpret_cast<uint16_t*>(t.entry(slot))[i % d] = x[i];
  }
}

constexpr int kKvMaxDim = 2048;

// The window insert as its kernel gets it.
struct KvInsertLaunch : KvInsertParams {
  const float* freqs = nullptr;  // [rope_dim / 2]
  int32_t* err = nullptr;
};

// 1/sqrt(mean(x²) + eps) of the CTA's row as the CPU's rms_norm computes it: the squares staged, then
// warp 0 sums them in the CPU's 8-lane order. Thread t contributes x0², x1² of dims 2t, 2t+1.
__device__ float kv_rms_factor(float x0, float x1, int d, float eps) {
  __shared__ float sq[kKvMaxDim];
  __shared__ float r_shared;
  sq[2 * threadIdx.x] = __fmul_rn(x0, x0);
  sq[2 * threadIdx.x + 1] = __fmul_rn(x1, x1);
  __syncthreads();
  if (threadIdx.x < kWarp) {
    float chain = 0.0f;
    for (int i = threadIdx.x % 8; i < d; i += 8) chain = __fadd_rn(chain, sq[i]);
    const float ss = lane8_combine(chain);
    if (threadIdx.x == 0) r_shared = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, static_cast<float>(d)), eps)));
  }
  __syncthreads();
  return r_shared;
}

// One CTA per row, thread t owns dims 2t, 2t+1: RMSNorm (bit-exact with rms_norm), RoPE (threads of
// the rope pairs), Q8 per 64-dim block (one warp each: nope blocks start on warp boundaries), then
// the entry bytes.
__global__ void kv_insert_kernel(KvInsertLaunch a) {
  pdl_enter();
  const int64_t row = blockIdx.x;
  const int t = threadIdx.x, d = a.dims.dim, rd = a.dims.rope_dim, n = d - rd;
  const int32_t slot = a.slots[row];
  if (slot < 0) return;  // uniform over the CTA
  if (!a.table.holds(slot)) {
    if (t == 0) report(a.err, DeviceError::kStoreSlot);
    return;
  }
  const uint16_t* x = a.x + row * d;
  const float x0 = bf16_to_f(x[2 * t]), x1 = bf16_to_f(x[2 * t + 1]);
  const float r = kv_rms_factor(x0, x1, d, a.eps);
  float y0 = round_bf16(__fmul_rn(bf16_to_f(a.norm_weight[2 * t]), __fmul_rn(x0, r)));
  float y1 = round_bf16(__fmul_rn(bf16_to_f(a.norm_weight[2 * t + 1]), __fmul_rn(x1, r)));
  uint8_t* e = a.table.entry(slot);
  const bool fp8 = a.table.format == KvEntryFormat::kAttnFp8;
  if (2 * t >= n) {  // RoPE pair (2t, 2t+1) of the rope part
    rope_rotate(y0, y1, static_cast<float>(a.positions[row]) * a.freqs[(2 * t - n) / 2], false);
    y0 = round_bf16(y0);
    y1 = round_bf16(y1);
    const uint32_t pair = static_cast<uint32_t>(f_to_bf16(y0)) | (static_cast<uint32_t>(f_to_bf16(y1)) << 16);
    *reinterpret_cast<uint32_t*>(e + (fp8 ? n + 2 * (2 * t - n) : 4 * t)) = pair;  // one 32-bit store
  } else {  // Q8 of this thread's 64-dim block (the warp's amax), then the entry codec on the result
    const auto quantize = [](float v0, float v1, uint8_t& c0, uint8_t& c1) {
      const uint8_t eb = ceil_pow2_e8(fmaxf(warp_max(fmaxf(fabsf(v0), fabsf(v1))), 1e-4f) * (1.0f / 448.0f));
      const float inv = pow2_inverse(e8_value(eb));
      c0 = static_cast<uint8_t>(act_code(v0, inv));
      c1 = static_cast<uint8_t>(act_code(v1, inv));
      return eb;
    };
    uint8_t c0, c1;
    const float sc = e8_value(quantize(y0, y1, c0, c1));
    y0 = e4m3_to_f(c0) * sc;  // the simulated values (exact)
    y1 = e4m3_to_f(c1) * sc;
    if (fp8) {  // re-encoded as the codec does: the same values, maybe a smaller scale
      const uint8_t eb = quantize(y0, y1, c0, c1);
      e[2 * t] = c0;
      e[2 * t + 1] = c1;
      if (t % kWarp == 0) e[n + 2 * rd + (2 * t) / 64] = eb;
    } else {
      const uint32_t pair = static_cast<uint32_t>(f_to_bf16(y0)) | (static_cast<uint32_t>(f_to_bf16(y1)) << 16);
      *reinterpret_cast<uint32_t*>(e + 4 * t) = pair;
    }
  }
  if (fp8 && t == 0)
    for (int i = n + 2 * rd + n / 64; i < a.table.entry_bytes; ++i) e[i] = 0;
}

// The generic sparse attention, bit-exact with backend/cpu/attention.cpp: one CTA per (token, group of up
// to 8 heads), which share the decoded entries. Per 64-index block: the valid entries in list order;
// scores as the CPU's 8-lane dot (one thread per chain, over entries staged in shared memory) times the
// scale; the running max, glibc expf, the row sum and l in the CPU's order; then thread k adds
// bf16(p_i) * v_i[k] over the entries in order.
constexpr int kAttnThreads = 256;
constexpr int kHeadGroup = 8;
constexpr int kStageFloats = 9216;  // decoded entries staged for the score chains (a whole block at d <= 128)
constexpr int kPad = 8;             // row padding: the chains of one warp read 32 different banks
constexpr int kMaxChains = kBlock * kHeadGroup * 8 / kAttnThreads;  // score chains per thread
constexpr int kMaxChannels = 1024 / kAttnThreads;                   // channels per thread (head_dim <= 1024)

struct AttnShared {
  float p[kHeadGroup][kBlock];  // scores, then exp(s - m)
  float m[kHeadGroup], l[kHeadGroup], alpha[kHeadGroup];
  int32_t slot[kBlock];
  uint8_t win[kBlock];
  int n;
};

__device__ __forceinline__ float kv_value(const AttentionLaunch& a, const AttnShared& sh, int i, int k) {
  const EntryTable& tab = sh.win[i] ? a.window : a.compressed;
  return entry_value(tab, tab.entry(sh.slot[i]), k, a.head_dim, a.rope_dim);
}

// Warp 0 compacts the valid entries of list positions [b0, b0 + 64) in order (ballot prefix sums).
__device__ void gather(const AttentionLaunch& a, int64_t t, int64_t b0, AttnShared& sh) {
  if (threadIdx.x >= kWarp) return;
  const int lane = threadIdx.x;
  const int64_t width = int64_t{a.window_width} + a.compressed_width;
  int n = 0;
  for (int half = 0; half < kBlock / kWarp; ++half) {
    const int64_t i = b0 + half * kWarp + lane;
    const bool w = i < a.window_width;
    int32_t slot = -1;
    if (i < width)
      slot = w ? a.window_slots[t * a.window_width + i]
               : a.compressed_slots[t * a.compressed_width + (i - a.window_width)];
    bool ok = slot >= 0;
    if (ok && !(w ? a.window : a.compressed).holds(slot)) {
      report(a.err, DeviceError::kAttentionSlot);
      ok = false;
    }
    const unsigned mask = __ballot_sync(0xffffffffu, ok);
    if (ok) {
      const int at = n + __popc(mask & ((1u << lane) - 1u));
      sh.slot[at] = slot;
      sh.win[at] = w;
    }
    n += __popc(mask);
  }
  if (lane == 0) sh.n = n;
}

// sh.p[h][e0 + e] = dot(q_h, kv_e) * scale for the ne staged entries: chain c = (e, h, j) runs the CPU's
// lane j (elements j, j+8, ...) and each 8 consecutive threads combine theirs.
__device__ void score_chains(const AttentionLaunch& a, const float* q, const float* kv, int e0, int ne, int gh,
                             AttnShared& sh) {
  const int d = a.head_dim, stride = d + kPad, j = threadIdx.x % 8, chains = ne * gh * 8;
  float acc[kMaxChains];
  int qo[kMaxChains], ko[kMaxChains];  // row offsets of chain r's head and entry
#pragma unroll
  for (int r = 0; r < kMaxChains; ++r) {
    const int c = threadIdx.x + r * kAttnThreads;
    acc[r] = 0.0f;
    qo[r] = c / 8 % gh * stride;
    ko[r] = c / 8 / gh * stride;
  }
  for (int i = j; i < d; i += 8) {
#pragma unroll
    for (int r = 0; r < kMaxChains; ++r)
      if (threadIdx.x + r * kAttnThreads < chains) acc[r] = __fadd_rn(acc[r], __fmul_rn(q[qo[r] + i], kv[ko[r] + i]));
  }
#pragma unroll
  for (int r = 0; r < kMaxChains; ++r) {
    if (r * kAttnThreads >= chains) break;  // uniform: every lane of a warp takes part in the combine
    const int c = threadIdx.x + r * kAttnThreads;
    const float dot = lane8_combine(acc[r]);
    if (j == 0 && c < chains) sh.p[c / 8 % gh][e0 + c / 8 / gh] = __fmul_rn(dot, a.softmax_scale);
  }
}

// Scores of the block's n entries, staged in chunks of `per` entries (all at once when n <= per).
__device__ void block_scores(const AttentionLaunch& a, const float* q, float* kv, int per, int gh, AttnShared& sh) {
  const int d = a.head_dim, stride = d + kPad, n = sh.n;
  for (int e0 = 0; e0 < n; e0 += per) {
    const int ne = min(per, n - e0);
    __syncthreads();  // the previous chunk's chains are done
    for (int idx = threadIdx.x; idx < ne * d; idx += kAttnThreads)
      kv[idx / d * stride + idx % d] = kv_value(a, sh, e0 + idx / d, idx % d);
    __syncthreads();
    score_chains(a, q, kv, e0, ne, gh, sh);
  }
  __syncthreads();
}

// The CPU's attend_block after the scores: m, alpha, exp, row sum and l per head; sh.p becomes exp(s - m).
__device__ void block_softmax(int gh, AttnShared& sh) {
  const int n = sh.n, h = threadIdx.x;
  if (h < gh) {
    float bm = -INFINITY;
    for (int i = 0; i < n; ++i) bm = bm < sh.p[h][i] ? sh.p[h][i] : bm;
    const float m_new = sh.m[h] < bm ? bm : sh.m[h];
    sh.alpha[h] = host_expf(__fsub_rn(sh.m[h], m_new));  // 0 for the first block (m = -inf)
    sh.m[h] = m_new;
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < gh * n; idx += kAttnThreads)
    sh.p[idx / n][idx % n] = host_expf(__fsub_rn(sh.p[idx / n][idx % n], sh.m[idx / n]));
  __syncthreads();
  if (h < gh) {
    float row_sum = 0;
    for (int i = 0; i < n; ++i) row_sum = __fadd_rn(row_sum, sh.p[h][i]);
    sh.l[h] = __fadd_rn(__fmul_rn(sh.l[h], sh.alpha[h]), row_sum);
  }
}

// acc = acc * alpha + sum_i bf16(p_i) * v_i, entries in order (staged values when the block was staged whole).
__device__ void block_pv(const AttentionLaunch& a, const float* kv, bool staged, int gh, const AttnShared& sh,
                         float (&acc)[kHeadGroup][kMaxChannels]) {
  const int d = a.head_dim, n = sh.n;
#pragma unroll
  for (int c = 0; c < kMaxChannels; ++c) {
    const int k = threadIdx.x + c * kAttnThreads;
    if (k >= d) break;
#pragma unroll
    for (int h = 0; h < kHeadGroup; ++h)
      if (h < gh) acc[h][c] = __fmul_rn(acc[h][c], sh.alpha[h]);
    for (int i = 0; i < n; ++i) {
      const float v = staged ? kv[i * (d + kPad) + k] : kv_value(a, sh, i, k);
#pragma unroll
      for (int h = 0; h < kHeadGroup; ++h)
        if (h < gh) acc[h][c] = __fadd_rn(acc[h][c], __fmul_rn(round_bf16(sh.p[h][i]), v));
    }
  }
}

__global__ void __launch_bounds__(kAttnThreads) sparse_attention_kernel(AttentionLaunch a, int groups, int per) {
  pdl_enter();
  extern __shared__ float4 dyn4[];
  __shared__ AttnShared sh;
  const int d = a.head_dim, stride = d + kPad;
  float* q = reinterpret_cast<float*>(dyn4);
  float* kv = q + kHeadGroup * stride;
  const int64_t t = blockIdx.x / groups;
  const int h0 = static_cast<int>(blockIdx.x % groups) * kHeadGroup, gh = min(kHeadGroup, a.heads - h0);
  for (int idx = threadIdx.x; idx < gh * d; idx += kAttnThreads)
    q[idx / d * stride + idx % d] = bf16_to_f(a.q[(t * a.heads + h0) * d + idx]);
  if (threadIdx.x < kHeadGroup) {
    sh.m[threadIdx.x] = -INFINITY;
    sh.l[threadIdx.x] = 0.0f;
  }
  float acc[kHeadGroup][kMaxChannels] = {};
  const int64_t width = int64_t{a.window_width} + a.compressed_width;
  for (int64_t b0 = 0; b0 < width; b0 += kBlock) {
    __syncthreads();  // the previous block's readers of sh are done
    gather(a, t, b0, sh);
    __syncthreads();
    if (sh.n == 0) continue;  // an all-masked block leaves every head's state unchanged
    block_scores(a, q, kv, per, gh, sh);
    block_softmax(gh, sh);
    __syncthreads();
    block_pv(a, kv, sh.n <= per, gh, sh, acc);
  }
  __syncthreads();
#pragma unroll
  for (int c = 0; c < kMaxChannels; ++c) {
    const int k = threadIdx.x + c * kAttnThreads;
    if (k >= d) break;
#pragma unroll
    for (int h = 0; h < kHeadGroup; ++h) {
      if (h >= gh) break;
      uint16_t* out = a.out + (t * a.heads + h0 + h) * d;
      if (sh.m[h] == -INFINITY) {
        out[k] = 0;
        continue;
      }
      const float l = __fadd_rn(sh.l[h], host_expf(__fsub_rn(a.sink[h0 + h], sh.m[h])));
      out[k] = f_to_bf16(__fdiv_rn(acc[h][c], l));
    }
  }
}

}  // namespace

void store_entries(const StoreEntriesParams& p, int32_t* err, cudaStream_t stream) {
  if (p.rows == 0) return;
  const EntryTable& table = p.table;
  const int head_dim = p.dims.dim, rope_dim = p.dims.rope_dim;
  DSV4_CUDA_REQUIRE(table.format == KvEntryFormat::kAttnFp8 || table.format == KvEntryFormat::kBf16 ||
                        table.format == KvEntryFormat::kF32,
                    "store_entries: the CUDA backend stores attn-fp8, bf16 and f32 entries (index keys are written "
                    "by compressor_emit)");
  if (table.format == KvEntryFormat::kAttnFp8) {
    const int n = head_dim - rope_dim;
    DSV4_CUDA_REQUIRE(n > 0 && n % 64 == 0, "store_entries: nope dims must be a positive multiple of 64");
    const int64_t warps = p.rows * (n / 64);
    launch_kernel(store_fp8_kernel, static_cast<unsigned>((warps * kWarp + 255) / 256), 256, 0, stream, p.x, p.rows,
                  head_dim, rope_dim, table, p.slots, err);
  } else {
    const int64_t n = p.rows * head_dim;
    launch_kernel(store_plain_kernel, static_cast<unsigned>((n + 255) / 256), 256, 0, stream, p.x, p.rows, head_dim,
                  table, p.slots, err);
  }
}

void kv_insert(const KvInsertParams& p, const float* freqs, int32_t* err, cudaStream_t stream) {
  if (p.rows == 0) return;
  const int d = p.dims.dim, r = p.dims.rope_dim, n = d - r;
  DSV4_CUDA_REQUIRE(n > 0 && n % 64 == 0 && r % 2 == 0 && d <= 2048,
                    "kv_insert: dim - rope_dim must be a positive multiple of 64 and dim at most 2048");
  DSV4_CUDA_REQUIRE(p.table.format == KvEntryFormat::kAttnFp8 || p.table.format == KvEntryFormat::kBf16,
                    "kv_insert: the window holds attn-fp8 or bf16 entries");
  launch_kernel(kv_insert_kernel, static_cast<unsigned>(p.rows), d / 2, 0, stream, KvInsertLaunch{p, freqs, err});
}

void sparse_attention(const SparseAttentionParams& p, const float* freqs, int32_t* err, cudaStream_t stream,
                      int64_t shadow_min_tokens) {
  if (p.tokens * p.heads == 0) return;
  AttentionLaunch a{p, freqs, err};
  const bool fast = mqa_fast_path(p), shadow = fast && shadow_min_tokens > 0 && p.tokens >= shadow_min_tokens;
  // Un-normed queries: the shadow kernel normalises and ropes them in its query load (a prefill chunk saves
  // head_rms_norm's pass over q); elsewhere that runs first, in place (in mqa_partial's load it cost a decode
  // step more than the launch it saves: docs/perf-history.md, session 42).
  if (p.q_unnormed && !shadow) {
    head_rms_norm({p.q_unnormed, p.tokens, p.heads, p.head_dim, p.q_norm_eps, p.positions, p.rope}, freqs, stream);
    a.q = p.q_unnormed, a.q_unnormed = nullptr;
  }
  if (fast) return sparse_attention_mqa(a, stream, shadow ? kMqaShadowRows : 0);  // inverse RoPE inside
  sparse_attention_generic(a, stream);
  if (p.positions)
    rope({p.out, p.tokens, p.heads, p.head_dim, p.positions, p.rope, true}, freqs, stream);  // as the CPU
}

void sparse_attention_generic(const AttentionLaunch& a, cudaStream_t stream) {
  DSV4_CUDA_REQUIRE(a.head_dim >= 1 && a.head_dim <= kMaxChannels * kAttnThreads,
                    "sparse_attention: head_dim must lie in [1, 1024]");
  if (a.tokens * a.heads == 0) return;
  const int stride = a.head_dim + kPad;
  const int per = std::min(kBlock, std::max(1, kStageFloats / stride));  // entries staged per score chunk
  const size_t bytes = sizeof(float) * static_cast<size_t>((kHeadGroup + per) * stride);
  // Up to ~70 KB of shared memory (head_dim 1024), past the default 48 KB.
  constexpr size_t kMaxBytes = sizeof(float) * (kHeadGroup * (kMaxChannels * kAttnThreads + kPad) + kStageFloats);
  allow_dynamic_smem(sparse_attention_kernel, kMaxBytes);
  const int groups = (a.heads + kHeadGroup - 1) / kHeadGroup;
  launch_kernel(sparse_attention_kernel, static_cast<unsigned>(a.tokens * groups), kAttnThreads, bytes, stream, a,
                groups, per);
}

}  // namespace dsv4::cuda
