// Decode steps of several sequences at different positions, for equivalence tests of the step modes:
// each sequence is prefilled to its own length, then all decode together for `steps` steps (one
// sequence leaves halfway, so the batch changes shape), their logits recorded step by step.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "model/model.h"
#include "model/paged_kv.h"

namespace dsv4::testing {

struct DecodeRun {
  std::vector<int64_t> prompts;  // prompt length of each sequence
  int64_t steps = 0;
  uint32_t seed = 1;
};

// One vector of logits per decode step ([slices, vocab] rows in slice order).
inline std::vector<std::vector<float>> decode_steps(Model& m, Device* dev, const DecodeRun& run) {
  const ModelConfig& c = m.config();
  const int n = static_cast<int>(run.prompts.size());
  const int64_t longest = *std::max_element(run.prompts.begin(), run.prompts.end()) + run.steps + 1;
  std::mt19937 rng(run.seed);
  std::vector<std::vector<int32_t>> ids(static_cast<size_t>(n));
  for (auto& v : ids)
    for (int64_t i = 0; i < longest; ++i)
      v.push_back(static_cast<int32_t>(rng() % static_cast<uint32_t>(c.vocab_size)));
  int64_t in_flight = 0;  // every prefill's sliding state stays until its sequence allocates again
  for (const int64_t p : run.prompts) in_flight += p + 1;
  OwnedPagedCache cache(c, n, longest, in_flight, KvDTypes{}, dev);
  for (int s = 0; s < n; ++s) {
    const int64_t p = run.prompts[static_cast<size_t>(s)];
    cache.add(s, p);
    cache.allocate(s, p, std::span<const int32_t>(ids[static_cast<size_t>(s)].data(), static_cast<size_t>(p)));
    ForwardBatch b;
    b.add(s, 0, ids[static_cast<size_t>(s)].data(), p, false);
    m.forward(b, cache.access());
  }
  std::vector<std::vector<float>> out;
  for (int64_t k = 0; k < run.steps; ++k) {
    ForwardBatch b;
    for (int s = 0; s < n; ++s) {
      if (s == n - 1 && n > 1 && k >= run.steps / 2) continue;  // the last sequence leaves halfway
      const int64_t pos = run.prompts[static_cast<size_t>(s)] + k;
      const auto& v = ids[static_cast<size_t>(s)];
      cache.allocate(s, 1, std::span<const int32_t>(v.data(), static_cast<size_t>(pos + 1)));
      b.add(s, pos, v.data() + pos, 1);
    }
    out.push_back(m.forward(b, cache.access()));
  }
  return out;
}

}  // namespace dsv4::testing
