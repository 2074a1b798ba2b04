#include "backend/cpu/compressor.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include "backend/cpu/cpu_support.h"
#include "backend/cpu/linear.h"
#include "backend/cpu/norms.h"
#include "backend/cpu/rotary.h"
#include "core/error.h"
#include "core/quant.h"

namespace dsv4::cpu {
namespace {

int coff(int ratio) { return ratio == 4 ? 2 : 1; }  // overlap doubles the channels

// Pools one entry: e[ch] = Σ softmax(g) · a over the candidate rows (null = absent previous row).
void pool_entry(const std::vector<const float*>& rows, int ratio, int dc, float* e, float* ex) {
  const int c = coff(ratio);
  const int64_t cd = int64_t{c} * dc;
  const int n = static_cast<int>(rows.size());
  // Candidate r reads value channel vo + ch and score channel cd + vo + ch of its row.
  auto value_offset = [&](int r) { return (c == 2 && r < ratio) ? int64_t{0} : int64_t{c - 1} * dc; };
  float* mx = e;  // reuse e as the running max until the end
  std::fill(mx, mx + dc, -std::numeric_limits<float>::infinity());
  for (int r = 0; r < n; ++r) {
    if (!rows[r]) continue;
    const float* g = rows[r] + cd + value_offset(r);
    for (int ch = 0; ch < dc; ++ch) mx[ch] = std::max(mx[ch], g[ch]);
  }
  float* sum = ex + int64_t{n} * dc;
  std::fill(sum, sum + dc, 0.0f);
  for (int r = 0; r < n; ++r) {
    if (!rows[r]) continue;
    const float* g = rows[r] + cd + value_offset(r);
    float* x = ex + int64_t{r} * dc;
    for (int ch = 0; ch < dc; ++ch) {
      x[ch] = std::exp(g[ch] - mx[ch]);
      sum[ch] += x[ch];
    }
  }
  std::fill(e, e + dc, 0.0f);
  for (int r = 0; r < n; ++r) {
    if (!rows[r]) continue;
    const float* a = rows[r] + value_offset(r);
    const float* x = ex + int64_t{r} * dc;
    for (int ch = 0; ch < dc; ++ch) e[ch] += x[ch] / sum[ch] * a[ch];
  }
}

// bf16 cast, RMSNorm, RoPE at the block's first position, then the cache simulation.
void post_process(const CompressorEmitParams& p, const float* norm_w, const float* freqs, int32_t block, float* e) {
  const int dc = p.head_dim, r = p.rope_dim;
  for (int i = 0; i < dc; ++i) e[i] = round_bf16(e[i]);
  rms_norm_row(e, norm_w, dc, p.norm_eps, e);
  for (int i = 0; i < dc; ++i) e[i] = round_bf16(e[i]);
  float* cs = thread_scratch<float>(Scratch::kRow2, static_cast<size_t>(r));
  float* sn = cs + r / 2;
  rope_angles(freqs, r / 2, block * p.ratio, cs, sn);
  rope_rotate(e + dc - r, cs, sn, r / 2, false);
  for (int i = dc - r; i < dc; ++i) e[i] = round_bf16(e[i]);
  if (p.indexer) {
    hadamard_row(e, dc);
    for (int i = 0; i < dc; ++i) e[i] = round_bf16(e[i]);
    fake_quant_e2m1({e, static_cast<size_t>(dc)});
  } else {
    fake_quant_e4m3({e, static_cast<size_t>(dc - r)}, 64);
  }
}

}  // namespace

void compressor_step(ThreadPool& pool, const CompressorStepParams& p) {
  const int64_t cd = int64_t{coff(p.ratio)} * p.head_dim;
  std::vector<float> a(static_cast<size_t>(p.tokens * cd)), g(a.size());
  linear(pool, {.x = p.x, .rows = p.tokens, .w = p.wkv, .y = a.data(), .y_type = ActType::kF32});
  linear(pool, {.x = p.x, .rows = p.tokens, .w = p.wgate, .y = g.data(), .y_type = ActType::kF32});
  const KvEntryDims dims{static_cast<int>(2 * cd), 0};
  pool.parallel_for(p.tokens, [&](int64_t t0, int64_t t1) {
    float* row = thread_scratch<float>(Scratch::kRow, static_cast<size_t>(2 * cd));
    for (int64_t t = t0; t < t1; ++t) {
      if (p.state_slots[t] < 0) continue;
      const float* ape = p.ape + (p.positions[t] % p.ratio) * cd;
      std::copy(&a[static_cast<size_t>(t * cd)], &a[static_cast<size_t>((t + 1) * cd)], row);
      for (int64_t i = 0; i < cd; ++i) row[cd + i] = g[static_cast<size_t>(t * cd + i)] + ape[i];
      encode_kv_entry(KvEntryFormat::kF32, dims, {row, static_cast<size_t>(2 * cd)},
                      {checked_entry(p.state, p.state_slots[t], "compressor_step: state"),
                       static_cast<size_t>(p.state.entry_bytes)});
    }
  });
}

void compressor_emit(ThreadPool& pool, const CompressorEmitParams& p) {
  const int c = coff(p.ratio), dc = p.head_dim;
  const int64_t cd = int64_t{c} * dc, n_rows = int64_t{c} * p.ratio;
  const std::vector<float> freqs = rope_frequencies(p.rope);
  std::vector<float> norm_w(static_cast<size_t>(dc));
  bf16_to_f32(p.norm_weight, norm_w.data(), dc);
  const KvEntryDims state_dims{static_cast<int>(2 * cd), 0};
  pool.parallel_for(p.entries, [&](int64_t e0, int64_t e1) {
    float* rows_buf = thread_scratch<float>(Scratch::kBlock, static_cast<size_t>(n_rows * 2 * cd));
    float* work = thread_scratch<float>(Scratch::kScores, static_cast<size_t>((n_rows + 1) * dc + dc));
    float* e = work + (n_rows + 1) * dc;
    std::vector<const float*> rows(static_cast<size_t>(n_rows));
    for (int64_t i = e0; i < e1; ++i) {
      if (p.block_index[i] < 0) continue;  // a padded step's empty emission item
      for (int64_t r = 0; r < n_rows; ++r) {
        const int32_t slot = p.rows[i * n_rows + r];
        const bool previous = c == 2 && r < p.ratio;
        DSV4_CHECK(slot >= 0 || previous, "compressor_emit: entry {} lacks current-block row {}", p.block_index[i],
                   r - (c - 1) * p.ratio);
        rows[static_cast<size_t>(r)] = nullptr;
        if (slot < 0) continue;
        float* dst = rows_buf + r * 2 * cd;
        decode_kv_entry(
            KvEntryFormat::kF32, state_dims,
            {checked_entry(p.state, slot, "compressor_emit: state"), static_cast<size_t>(p.state.entry_bytes)},
            {dst, static_cast<size_t>(2 * cd)});
        rows[static_cast<size_t>(r)] = dst;
      }
      pool_entry(rows, p.ratio, dc, e, work);
      post_process(p, norm_w.data(), freqs.data(), p.block_index[i], e);
      if (p.out_slots[i] < 0) continue;
      encode_kv_entry(
          p.out.format, {dc, p.rope_dim}, {e, static_cast<size_t>(dc)},
          {checked_entry(p.out, p.out_slots[i], "compressor_emit: output"), static_cast<size_t>(p.out.entry_bytes)});
    }
  });
}

}  // namespace dsv4::cpu
