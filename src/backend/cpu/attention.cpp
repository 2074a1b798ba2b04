#include "backend/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/cpu_support.h"

namespace dsv4::cpu {
namespace {

constexpr int kBlock = 64;     // index block of the reference kernel
constexpr int kHeadGroup = 8;  // heads per work item (they share the decoded entries)
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Online-softmax state of one head.
struct HeadState {
  float m = kNegInf;
  float l = 0;
  float* acc = nullptr;  // [head_dim]
};

// Decodes the valid entries of list positions [b0, b1) into kv rows; returns how many.
int gather_block(const SparseAttentionParams& p, int64_t t, int64_t b0, int64_t b1, float* kv) {
  const KvEntryDims dims{p.head_dim, p.rope_dim};
  int n = 0;
  for (int64_t i = b0; i < b1; ++i) {
    const bool in_window = i < p.window_width;
    const int32_t slot = in_window ? p.window_slots[t * p.window_width + i]
                                   : p.compressed_slots[t * p.compressed_width + (i - p.window_width)];
    if (slot < 0) continue;
    const EntryTable& table = in_window ? p.window : p.compressed;
    decode_kv_entry(table.format, dims,
                    {checked_entry(table, slot, "sparse_attention"), static_cast<size_t>(table.entry_bytes)},
                    {kv + int64_t{n} * p.head_dim, static_cast<size_t>(p.head_dim)});
    ++n;
  }
  return n;
}

// One block of n entries for one head: scores, running max/sum update, rescale and P·V.
DSV4_SIMD_CLONES void attend_block(const float* q, const float* kv, int n, int d, float scale, HeadState& st,
                                   float* s) {
  float block_max = kNegInf;
  for (int i = 0; i < n; ++i) {
    s[i] = dot(q, kv + int64_t{i} * d, d) * scale;
    block_max = std::max(block_max, s[i]);
  }
  const float m_new = std::max(st.m, block_max);
  const float alpha = std::exp(st.m - m_new);  // 0 for the first block (st.m = −inf)
  float row_sum = 0;
  for (int i = 0; i < n; ++i) {
    s[i] = std::exp(s[i] - m_new);
    row_sum += s[i];
  }
  st.l = st.l * alpha + row_sum;
  if (alpha != 1.0f) {
    for (int k = 0; k < d; ++k) st.acc[k] *= alpha;
  }
  for (int i = 0; i < n; ++i) {
    const float pb = round_bf16(s[i]);
    const float* v = kv + int64_t{i} * d;
    for (int k = 0; k < d; ++k) st.acc[k] += pb * v[k];
  }
  st.m = m_new;
}

void run_item(const SparseAttentionParams& p, int64_t t, int h0, int h1) {
  const int d = p.head_dim;
  const int nh = h1 - h0;
  const int64_t width = int64_t{p.window_width} + p.compressed_width;
  float* kv = thread_scratch<float>(Scratch::kBlock, static_cast<size_t>(kBlock) * d);
  float* q = thread_scratch<float>(Scratch::kRow, static_cast<size_t>(nh) * d * 2);
  float* acc = q + int64_t{nh} * d;
  float s[kBlock];
  HeadState st[kHeadGroup];
  bf16_to_f32(p.q + (t * p.heads + h0) * d, q, int64_t{nh} * d);
  std::fill(acc, acc + int64_t{nh} * d, 0.0f);
  for (int h = 0; h < nh; ++h) st[h].acc = acc + int64_t{h} * d;
  for (int64_t b0 = 0; b0 < width; b0 += kBlock) {
    const int n = gather_block(p, t, b0, std::min(width, b0 + kBlock), kv);
    if (n == 0) continue;  // an all-masked block leaves every head's state unchanged
    for (int h = 0; h < nh; ++h) attend_block(q + int64_t{h} * d, kv, n, d, p.softmax_scale, st[h], s);
  }
  for (int h = 0; h < nh; ++h) {
    uint16_t* out = p.out + (t * p.heads + h0 + h) * d;
    if (st[h].m == kNegInf) {
      std::fill(out, out + d, uint16_t{0});
      continue;
    }
    const float l = st[h].l + std::exp(p.sink[h0 + h] - st[h].m);
    for (int k = 0; k < d; ++k) out[k] = float_to_bf16(st[h].acc[k] / l);
  }
}

}  // namespace

void sparse_attention(ThreadPool& pool, const SparseAttentionParams& p) {
  const int groups = (p.heads + kHeadGroup - 1) / kHeadGroup;
  pool.parallel_for(p.tokens * groups, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int g = static_cast<int>(i % groups);
      run_item(p, i / groups, g * kHeadGroup, std::min(p.heads, (g + 1) * kHeadGroup));
    }
  });
}

}  // namespace dsv4::cpu
