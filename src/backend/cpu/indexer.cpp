#include "backend/cpu/indexer.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/cpu_support.h"
#include "core/error.h"

namespace dsv4::cpu {
namespace {

// score_j = bf16(Σ_h bf16(relu(bf16(q_h·K_j)) · w_h)), the sum over heads in order.
float score_key(const float* q, const float* w, const float* key, int heads, int d) {
  float total = 0;
  for (int h = 0; h < heads; ++h) {
    const float s = round_bf16(dot(q + int64_t{h} * d, key, d));
    total += round_bf16(std::max(s, 0.0f) * w[h]);
  }
  return round_bf16(total);
}

// Descending score, ties to the lower index (a strict total order: the selection is unique).
bool ranks_before(float sa, int32_t a, float sb, int32_t b) { return sa != sb ? sa > sb : a < b; }

void select_one(const IndexerTopkParams& p, int64_t t) {
  const int64_t seq = p.token_seq ? p.token_seq[t] : 0;
  DSV4_CHECK(seq >= 0 && seq < p.sequences, "indexer_topk: token {} names sequence {} of {}", t, seq, p.sequences);
  const int64_t by_position = (int64_t{p.positions[t]} + 1) / p.ratio;
  DSV4_CHECK(p.key_count[seq] >= 0 && p.key_count[seq] <= p.key_stride,
             "indexer_topk: sequence {} has {} keys, outside [0, key_stride {}]", seq, p.key_count[seq], p.key_stride);
  const int64_t eligible = std::max<int64_t>(0, std::min<int64_t>(p.key_count[seq], by_position));
  const int d = p.head_dim;
  float* q = thread_scratch<float>(Scratch::kRow, static_cast<size_t>(p.heads) * (d + 1) + static_cast<size_t>(d));
  float* w = q + int64_t{p.heads} * d;
  float* key = w + p.heads;
  float* scores = thread_scratch<float>(Scratch::kScores, static_cast<size_t>(eligible));
  int32_t* order = thread_scratch<int32_t>(Scratch::kBlock, static_cast<size_t>(eligible));
  bf16_to_f32(p.q + t * p.heads * d, q, int64_t{p.heads} * d);
  for (int h = 0; h < p.heads; ++h) w[h] = round_bf16(bf16_to_float(p.weights[t * p.heads + h]) * p.weight_scale);
  const int32_t* slots = p.key_slots + seq * p.key_stride;
  for (int64_t j = 0; j < eligible; ++j) {
    decode_kv_entry(p.keys.format, {d, 0},
                    {checked_entry(p.keys, slots[j], "indexer_topk: key"), static_cast<size_t>(p.keys.entry_bytes)},
                    {key, static_cast<size_t>(d)});
    const float score = score_key(q, w, key, p.heads, d);
    scores[j] = std::isnan(score) ? -std::numeric_limits<float>::infinity() : score;  // keeps the order strict
    order[j] = static_cast<int32_t>(j);
  }
  const int64_t k = std::min<int64_t>(p.topk, eligible);
  std::partial_sort(order, order + k, order + eligible,
                    [&](int32_t a, int32_t b) { return ranks_before(scores[a], a, scores[b], b); });
  int32_t* out = p.out_index + t * p.topk;
  for (int64_t r = 0; r < p.topk; ++r) out[r] = r < k ? order[r] : -1;
  if (p.out_slots) {
    int32_t* os = p.out_slots + t * p.topk;
    for (int64_t r = 0; r < p.topk; ++r) os[r] = r < k ? p.slot_map[seq * p.key_stride + order[r]] : -1;
  }
}

}  // namespace

void indexer_topk(ThreadPool& pool, const IndexerTopkParams& p) {
  pool.parallel_for(p.tokens, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) select_one(p, t);
  });
}

}  // namespace dsv4::cpu
