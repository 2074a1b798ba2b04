#include "backend/sample_row.h"

#include <algorithm>
#include <cmath>

namespace dsv4 {
namespace {

using sampling::mass;

// Heavier first; equal weights by id, so every cut is deterministic.
struct Heavier {
  const std::vector<double>& w;
  bool operator()(int32_t a, int32_t b) const {
    const double wa = w[static_cast<size_t>(a)], wb = w[static_cast<size_t>(b)];
    return wa != wb ? wa > wb : a < b;
  }
};

uint64_t total_mass(const std::vector<int32_t>& ids, const std::vector<double>& w) {
  uint64_t t = 0;
  for (int32_t id : ids) t += mass(w[static_cast<size_t>(id)]);
  return t;
}

// The first maximum (z holds no NaN).
int32_t first_max(const std::vector<double>& z) {
  size_t best = 0;
  for (size_t i = 1; i < z.size(); ++i)
    if (z[i] > z[best]) best = i;
  return static_cast<int32_t>(best);
}

// The shortest heaviest-first prefix whose mass reaches ceil(p · the set's mass); ids ascend after.
void keep_top_p(double p, std::vector<int32_t>& ids, const std::vector<double>& w) {
  const uint64_t need = sampling::top_p_need(p, total_mass(ids, w));
  // Most of the mass usually sits in a few ids: order a short head first, the rest only if needed.
  size_t head = std::min<size_t>(ids.size(), 256);
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(head), ids.end(), Heavier{w});
  for (;;) {
    uint64_t acc = 0;
    for (size_t i = 0; i < head; ++i) {
      acc += mass(w[static_cast<size_t>(ids[i])]);
      if (acc >= need) {
        ids.resize(i + 1);
        std::sort(ids.begin(), ids.end());
        return;
      }
    }
    if (head == ids.size()) break;  // not reached: the whole set's mass is at least need
    std::sort(ids.begin(), ids.end(), Heavier{w});
    head = ids.size();
  }
  std::sort(ids.begin(), ids.end());
}

// Candidates, top-k, top-p, then the first id whose running mass exceeds the target.
int32_t draw(const SampleRow& row, SampleScratch& s, int32_t best) {
  const double zmax = s.z[static_cast<size_t>(best)];
  s.w.resize(s.z.size());
  s.ids.clear();
  for (size_t i = 0; i < s.z.size(); ++i) {
    const double w = sampling::weight(s.z[i], zmax, row.temperature);
    s.w[i] = w;
    if (w > 0 && w >= row.min_p) s.ids.push_back(static_cast<int32_t>(i));
  }
  if (row.top_k > 0 && static_cast<int64_t>(s.ids.size()) > row.top_k) {
    const auto k = static_cast<std::ptrdiff_t>(row.top_k);
    std::nth_element(s.ids.begin(), s.ids.begin() + (k - 1), s.ids.end(), Heavier{s.w});
    s.ids.resize(static_cast<size_t>(k));
    std::sort(s.ids.begin(), s.ids.end());
  }
  if (row.top_p < 1) keep_top_p(row.top_p, s.ids, s.w);
  const uint64_t target = sampling::draw_target(row.u, total_mass(s.ids, s.w));
  uint64_t acc = 0;
  for (int32_t id : s.ids) {
    acc += mass(s.w[static_cast<size_t>(id)]);
    if (acc > target) return id;
  }
  return best;  // not reached: the maximum (mass 2^44) always survives and target < the total
}

// Log-softmax of the raw logits: the chosen id's value and rank, and the n most likely ids.
void raw_logprobs(const float* x, int64_t limit, int32_t token, int32_t n, SampleScratch& s, double* logprob,
                  int64_t* rank, int32_t* top_id, double* top_logprob) {
  const auto raw = [&](int64_t i) { return sampling::no_nan(x[i]); };
  if (rank) {
    const uint32_t key = sampling::raw_key(x[token]);
    *rank = 1;
    for (int64_t i = 0; i < limit; ++i) *rank += sampling::raw_key(x[i]) > key;
  }
  double m = raw(0);
  for (int64_t i = 1; i < limit; ++i) m = std::max(m, raw(i));
  double sum = 0;
  for (int64_t i = 0; i < limit; ++i) sum += sampling::exp(sampling::sub(raw(i), m));
  const double lse = m + std::log(sum);
  if (logprob) *logprob = raw(token) - lse;
  const auto k = static_cast<size_t>(std::min<int64_t>(n, limit));
  if (k == 0) return;
  s.order.resize(static_cast<size_t>(limit));
  s.ids.resize(static_cast<size_t>(limit));
  for (int64_t i = 0; i < limit; ++i) {
    s.order[static_cast<size_t>(i)] = sampling::raw_key(x[i]);
    s.ids[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  }
  std::partial_sort(s.ids.begin(), s.ids.begin() + static_cast<std::ptrdiff_t>(k), s.ids.end(),
                    [&](int32_t a, int32_t b) {
                      const uint32_t ka = s.order[static_cast<size_t>(a)], kb = s.order[static_cast<size_t>(b)];
                      return ka != kb ? ka > kb : a < b;
                    });
  for (size_t j = 0; j < k; ++j) {
    top_id[j] = s.ids[j];
    top_logprob[j] = raw(s.ids[j]) - lse;
  }
}

// The drawn (or greedy) id of the edited, allowed logits.
int32_t pick(const float* x, int64_t limit, const SampleRow& row, std::span<const SampleEdit> edits,
             const uint32_t* allow, SampleScratch& s) {
  s.z.assign(x, x + limit);
  for (const SampleEdit& e : edits) {
    double& z = s.z[static_cast<size_t>(e.id)];
    z = sampling::apply_edit(z, e);
  }
  for (double& z : s.z) z = sampling::no_nan(z);
  if (allow != nullptr) {
    for (int64_t i = 0; i < limit; ++i)
      if (!allows(allow, i)) s.z[static_cast<size_t>(i)] = -sampling::infinity();
  }
  const int32_t best = first_max(s.z);
  const bool drawn = row.temperature > 0 && s.z[static_cast<size_t>(best)] != -sampling::infinity();
  return drawn ? draw(row, s, best) : best;
}

}  // namespace

int32_t sample_row(const float* x, int64_t limit, const SampleRow& row, std::span<const SampleEdit> edits,
                   const uint32_t* allow, SampleScratch& s, double* logprob, int32_t* top_id, double* top_logprob,
                   int32_t top_width, int64_t* rank) {
  // A scored token (force_id) has nothing to draw.
  const int32_t token = row.force_id >= 0 ? row.force_id : pick(x, limit, row, edits, allow, s);
  if (logprob) *logprob = 0;
  if (rank) *rank = 0;
  for (int32_t j = 0; j < top_width; ++j) {
    top_id[j] = -1;
    top_logprob[j] = 0;
  }
  if (row.logprobs >= 0) raw_logprobs(x, limit, token, row.logprobs, s, logprob, rank, top_id, top_logprob);
  return token;
}

}  // namespace dsv4
