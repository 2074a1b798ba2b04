#include "backend/cuda/attention.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/row_kernels.h"

namespace dsv4::cuda {
namespace {

constexpr int kBlock = 64;  // index block of the reference kernel

// One warp per 64-element nope block (and the warp of block 0 also copies the rope part).
__global__ void store_fp8_kernel(const uint16_t* x, int64_t rows, int d, int r, DeviceTable t, const int32_t* slots,
                                 int32_t* err) {
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
  const float s = e8_value(eb);
  for (int i = 0; i < 2; ++i) e[b * 64 + lane * 2 + i] = f_to_e4m3(fminf(fmaxf(v[i] / s, -448.0f), 448.0f));
  if (lane == 0) e[n + 2 * r + b] = eb;
  if (b == 0) {
    uint16_t* rope = reinterpret_cast<uint16_t*>(e + n);
    for (int i = lane; i < r; i += kWarp) rope[i] = src[n + i];
    const int used = n + 2 * r + blocks;
    for (int i = used + lane; i < t.entry_bytes; i += kWarp) e[i] = 0;
  }
}

// Plain formats: bf16 copies, fp32 widens.
__global__ void store_plain_kernel(const uint16_t* x, int64_t rows, int d, DeviceTable t, const int32_t* slots,
                                   int32_t* err) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= rows * d) return;
  const int32_t slot = slots[i / d];
  if (slot < 0) return;
  if (!t.holds(slot)) return report(err, DeviceError::kStoreSlot);
  if (t.format == EntryFormat::kF32) {
    reinterpret_cast<float*>(t.entry(slot))[i % d] = bf16_to_f(x[i]);
  } else {
    reinterpret_cast<uint16_t*>(t.entry(slot))[i % d] = x[i];
  }
}

__device__ float block_sum(float v, float* scratch) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float s = 0;
  for (int w = 0; w < (blockDim.x + kWarp - 1) / kWarp; ++w) s += scratch[w];
  __syncthreads();
  return s;
}

// One CTA per row, thread t owns dims 2t, 2t+1: RMSNorm (block sum), RoPE (threads of the rope pairs),
// Q8 per 64-dim block (one warp each: nope blocks start on warp boundaries), then the entry bytes.
__global__ void kv_insert_kernel(KvInsertArgs a) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const int t = threadIdx.x, d = a.dim, n = a.dim - a.rope_dim;
  const int32_t slot = a.slots[row];
  if (slot < 0) return;  // uniform over the CTA
  if (!a.table.holds(slot)) {
    if (t == 0) report(a.err, DeviceError::kStoreSlot);
    return;
  }
  const uint16_t* x = a.x + row * d;
  const float x0 = bf16_to_f(x[2 * t]), x1 = bf16_to_f(x[2 * t + 1]);
  const float r = 1.0f / sqrtf(block_sum(x0 * x0 + x1 * x1, scratch) / static_cast<float>(d) + a.eps);
  float y0 = round_bf16(bf16_to_f(a.norm_weight[2 * t]) * (x0 * r));
  float y1 = round_bf16(bf16_to_f(a.norm_weight[2 * t + 1]) * (x1 * r));
  uint8_t* e = a.table.entry(slot);
  const bool fp8 = a.table.format == EntryFormat::kAttnFp8;
  if (2 * t >= n) {  // RoPE pair (2t, 2t+1) of the rope part
    rope_rotate(y0, y1, static_cast<float>(a.positions[row]) * a.freqs[(2 * t - n) / 2], false);
    y0 = round_bf16(y0);
    y1 = round_bf16(y1);
    const uint32_t pair = static_cast<uint32_t>(f_to_bf16(y0)) | (static_cast<uint32_t>(f_to_bf16(y1)) << 16);
    *reinterpret_cast<uint32_t*>(e + (fp8 ? n + 2 * (2 * t - n) : 4 * t)) = pair;  // one 32-bit store
  } else {  // Q8 of this thread's 64-dim block (the warp's amax), then the entry codec on the result
    const auto quantize = [](float v0, float v1, uint8_t& c0, uint8_t& c1) {
      const uint8_t eb = ceil_pow2_e8(fmaxf(warp_max(fmaxf(fabsf(v0), fabsf(v1))), 1e-4f) * (1.0f / 448.0f));
      const float sc = e8_value(eb);
      c0 = f_to_e4m3(fminf(fmaxf(v0 / sc, -448.0f), 448.0f));
      c1 = f_to_e4m3(fminf(fmaxf(v1 / sc, -448.0f), 448.0f));
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
      if (t % kWarp == 0) e[n + 2 * a.rope_dim + (2 * t) / 64] = eb;
    } else {
      const uint32_t pair = static_cast<uint32_t>(f_to_bf16(y0)) | (static_cast<uint32_t>(f_to_bf16(y1)) << 16);
      *reinterpret_cast<uint32_t*>(e + 4 * t) = pair;
    }
  }
  if (fp8 && t == 0)
    for (int i = n + 2 * a.rope_dim + n / 64; i < a.table.entry_bytes; ++i) e[i] = 0;
}

// One block per (token, head), one thread per channel: thread k owns acc[k]. Scores are block sums;
// P·V re-reads each entry's element k (cheap next to the score pass).
__global__ void sparse_attention_kernel(AttentionArgs a) {
  __shared__ float scratch[32];
  __shared__ float s[kBlock];
  __shared__ int32_t slot_of[kBlock];
  __shared__ uint8_t from_window[kBlock];
  __shared__ int valid;
  const int64_t t = blockIdx.x / a.heads;
  const int h = static_cast<int>(blockIdx.x % a.heads);
  const int k = threadIdx.x, d = a.head_dim;
  const bool mine = k < d;
  const float qk = mine ? bf16_to_f(a.q[(t * a.heads + h) * d + k]) : 0.0f;
  float m = -INFINITY, l = 0, acc = 0;
  const int64_t width = int64_t{a.window_width} + a.compressed_width;
  for (int64_t b0 = 0; b0 < width; b0 += kBlock) {
    // Gather the block's valid entries in list order.
    __syncthreads();
    if (threadIdx.x == 0) {
      int n = 0;
      for (int64_t i = b0; i < min(width, b0 + kBlock); ++i) {
        const bool w = i < a.window_width;
        const int32_t slot = w ? a.window_slots[t * a.window_width + i]
                               : a.compressed_slots[t * a.compressed_width + (i - a.window_width)];
        if (slot < 0) continue;
        if (!(w ? a.window : a.compressed).holds(slot)) {
          report(a.err, DeviceError::kAttentionSlot);
          continue;
        }
        slot_of[n] = slot;
        from_window[n] = w;
        ++n;
      }
      valid = n;
    }
    __syncthreads();
    const int n = valid;
    if (n == 0) continue;
    float block_max = -INFINITY;
    for (int i = 0; i < n; ++i) {
      const DeviceTable& tab = from_window[i] ? a.window : a.compressed;
      const float v = mine ? entry_value(tab, tab.entry(slot_of[i]), k, d, a.rope_dim) : 0.0f;
      const float si = block_sum(qk * v, scratch) * a.softmax_scale;
      if (threadIdx.x == 0) s[i] = si;
      block_max = fmaxf(block_max, si);
    }
    __syncthreads();
    const float m_new = fmaxf(m, block_max);
    const float alpha = expf(m - m_new);
    float row_sum = 0;
    for (int i = 0; i < n; ++i) row_sum += expf(s[i] - m_new);
    l = l * alpha + row_sum;
    acc *= alpha;
    if (mine) {
      for (int i = 0; i < n; ++i) {
        const DeviceTable& tab = from_window[i] ? a.window : a.compressed;
        const float p = round_bf16(expf(s[i] - m_new));
        acc = __fadd_rn(acc, __fmul_rn(p, entry_value(tab, tab.entry(slot_of[i]), k, d, a.rope_dim)));
      }
    }
    m = m_new;
  }
  if (!mine) return;
  uint16_t* out = a.out + (t * a.heads + h) * d;
  if (m == -INFINITY) {
    out[k] = 0;
    return;
  }
  out[k] = f_to_bf16(acc / (l + expf(a.sink[h] - m)));
}

}  // namespace

void store_entries(const uint16_t* x, int64_t rows, int head_dim, int rope_dim, DeviceTable table, const int32_t* slots,
                   int32_t* err, cudaStream_t stream) {
  if (rows == 0) return;
  DSV4_CUDA_REQUIRE(
      table.format == EntryFormat::kAttnFp8 || table.format == EntryFormat::kBf16 || table.format == EntryFormat::kF32,
      "store_entries: the CUDA backend stores attn-fp8, bf16 and f32 entries (index keys are written "
      "by compressor_emit)");
  if (table.format == EntryFormat::kAttnFp8) {
    const int n = head_dim - rope_dim;
    DSV4_CUDA_REQUIRE(n > 0 && n % 64 == 0, "store_entries: nope dims must be a positive multiple of 64");
    const int64_t warps = rows * (n / 64);
    store_fp8_kernel<<<static_cast<unsigned>((warps * kWarp + 255) / 256), 256, 0, stream>>>(
        x, rows, head_dim, rope_dim, table, slots, err);
  } else {
    const int64_t n = rows * head_dim;
    store_plain_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(x, rows, head_dim, table, slots,
                                                                                   err);
  }
  DSV4_CUDA_CHECK_LAUNCH();
}

void kv_insert(const KvInsertArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return;
  const int n = a.dim - a.rope_dim;
  DSV4_CUDA_REQUIRE(n > 0 && n % 64 == 0 && a.rope_dim % 2 == 0 && a.dim <= 2048,
                    "kv_insert: dim - rope_dim must be a positive multiple of 64 and dim at most 2048");
  DSV4_CUDA_REQUIRE(a.table.format == EntryFormat::kAttnFp8 || a.table.format == EntryFormat::kBf16,
                    "kv_insert: the window holds attn-fp8 or bf16 entries");
  kv_insert_kernel<<<static_cast<unsigned>(a.rows), a.dim / 2, 0, stream>>>(a);
  DSV4_CUDA_CHECK_LAUNCH();
}

void sparse_attention(const AttentionArgs& a, cudaStream_t stream) {
  if (a.tokens * a.heads == 0) return;
  if (mqa_fast_path(a)) return sparse_attention_mqa(a, stream);  // inverse RoPE in its epilogue
  sparse_attention_generic(a, stream);
  if (a.positions) rope(a.out, a.tokens, a.heads, a.head_dim, a.rope_dim, a.positions, a.freqs, true, stream);
}

void sparse_attention_generic(const AttentionArgs& a, cudaStream_t stream) {
  DSV4_CUDA_REQUIRE(a.head_dim >= 1 && a.head_dim <= 1024, "sparse_attention: head_dim must lie in [1, 1024]");
  if (a.tokens * a.heads == 0) return;
  const int threads = (a.head_dim + kWarp - 1) / kWarp * kWarp;
  sparse_attention_kernel<<<static_cast<unsigned>(a.tokens * a.heads), threads, 0, stream>>>(a);
  DSV4_CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda
