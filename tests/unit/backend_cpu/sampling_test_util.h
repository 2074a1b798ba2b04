// Helpers of the sample op tests (CPU here, CUDA in tests/gpu): a batch of rows with their logits and
// edits, random edits of every kind, and the op's outputs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "backend/ops.h"

namespace dsv4::testing {

inline SampleRow sample_row(double temperature, int64_t top_k, double top_p, double min_p, double u,
                            int32_t logprobs = -1) {
  return {.temperature = temperature, .top_k = top_k, .top_p = top_p, .min_p = min_p, .u = u, .logprobs = logprobs};
}

// What the op writes; params() fills it with −7 first, so unwritten entries show.
struct SampleOut {
  std::vector<int32_t> token, top_id;
  std::vector<double> logprob, top_logprob;
  std::vector<int64_t> rank;
};

// Rows over logits [rows, cols] with their edits (each row's ids ascending, ranges in row order) and
// allow-sets (ceil(limit / 32) words each).
struct SampleBatch {
  int64_t cols = 0, limit = 0;
  int32_t top_width = 0;
  std::vector<float> x;
  std::vector<SampleRow> rows;
  std::vector<SampleEdit> edits;
  std::vector<uint32_t> allow;
  mutable std::vector<const uint32_t*> allow_sets;  // SampleParams::allow: one pointer per set of `allow`

  int64_t allow_words() const { return (limit + 31) / 32; }
  const uint32_t* allow_set(const SampleRow& row) const {
    return row.allow_row < 0 ? nullptr : allow.data() + row.allow_row * allow_words();
  }

  SampleParams params(SampleOut& o) const {
    const auto n = rows.size(), w = static_cast<size_t>(top_width);
    o.token.assign(n, -7);
    o.logprob.assign(n, -7);
    o.top_id.assign(n * w, -7);
    o.top_logprob.assign(n * w, -7);
    o.rank.assign(n, -7);
    SampleParams p;
    p.x = x.data();
    p.rows = static_cast<int64_t>(n);
    p.cols = cols;
    p.limit = limit;
    p.row = rows.data();
    p.edits = edits.data();
    p.edit_count = static_cast<int64_t>(edits.size());
    p.allow_rows = static_cast<int64_t>(allow.size()) / std::max<int64_t>(allow_words(), 1);
    allow_sets.clear();
    for (int64_t k = 0; k < p.allow_rows; ++k) allow_sets.push_back(allow.data() + k * allow_words());
    p.allow = allow_sets.data();
    p.token = o.token.data();
    p.logprob = o.logprob.data();
    p.top_width = top_width;
    p.top_id = o.top_id.data();
    p.top_logprob = o.top_logprob.data();
    p.rank = o.rank.data();
    return p;
  }

  // `count` random edits for `row` (appended last): logit bias, masks, repetition penalties, repetition
  // with presence/frequency, and now and then a second edit of the same id.
  void add_random_edits(SampleRow& row, std::mt19937& rng, int count) {
    row.edit_begin = static_cast<int32_t>(edits.size());
    std::vector<SampleEdit> e;
    std::uniform_real_distribution<double> u(0, 1);
    for (int i = 0; i < count; ++i) {
      SampleEdit d{.id = static_cast<int32_t>(rng() % static_cast<uint32_t>(limit))};
      switch (rng() % 4) {
        case 0:
          d.add = 8 * u(rng) - 4;
          break;
        case 1:
          d.mask = true;
          break;
        case 2:
          d.pos_div = d.neg_mul = 1 + u(rng);
          break;
        default:
          d.pos_div = d.neg_mul = 1.2;
          d.add = -(0.3 * static_cast<double>(rng() % 4) + 0.5);
          break;
      }
      e.push_back(d);
      if (rng() % 5 == 0) e.push_back({.id = d.id, .add = 0.25});
    }
    std::stable_sort(e.begin(), e.end(), [](const SampleEdit& a, const SampleEdit& b) { return a.id < b.id; });
    edits.insert(edits.end(), e.begin(), e.end());
    row.edit_end = static_cast<int32_t>(edits.size());
  }

  // A random allow-set for `row` (appended last): about `share` of the ids below the limit, at least one,
  // and now and then only the ids the edits left alone or only ids past the row's best raw logit.
  void add_random_allow(SampleRow& row, std::mt19937& rng, double share) {
    row.allow_row = static_cast<int32_t>(allow.size() / static_cast<size_t>(allow_words()));
    const size_t at = allow.size();
    allow.resize(at + static_cast<size_t>(allow_words()), 0);
    std::uniform_real_distribution<double> u(0, 1);
    const auto set = [&](int64_t i) { allow[at + static_cast<size_t>(i >> 5)] |= 1u << (i & 31); };
    for (int64_t i = 0; i < limit; ++i)
      if (u(rng) < share) set(i);
    set(static_cast<int64_t>(rng() % static_cast<uint32_t>(limit)));
  }
};

}  // namespace dsv4::testing
