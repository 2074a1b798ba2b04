// Sequences prefilled together (every sequence's last logits), then decoded together for a few steps:
// all the logits, in order. For tests that compare whole runs of one model across ways to run it.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "model/model.h"
#include "model/paged_kv.h"

namespace dsv4::testing {

inline std::vector<float> prefill_then_decode(Model& m, Device& dev, std::span<const int64_t> lens,
                                              std::span<const int32_t> ids, int64_t steps) {
  const ModelConfig& c = m.config();
  const auto n = static_cast<int32_t>(lens.size());
  const auto capacity = static_cast<int64_t>(ids.size());
  OwnedPagedCache cache(c, n, capacity, n * capacity, KvDTypes{}, &dev);
  ForwardBatch pre;
  for (int32_t s = 0; s < n; ++s) {
    cache.add(s, lens[static_cast<size_t>(s)]);
    cache.allocate(s, lens[static_cast<size_t>(s)], ids.first(static_cast<size_t>(lens[static_cast<size_t>(s)])));
    pre.add(s, 0, ids.data(), lens[static_cast<size_t>(s)]);
  }
  std::vector<float> all = m.forward(pre, cache.access());
  for (int64_t step = 0; step < steps; ++step) {
    ForwardBatch b;
    for (int32_t s = 0; s < n; ++s) {
      const int64_t pos = lens[static_cast<size_t>(s)] + step;
      cache.allocate(s, 1, ids.first(static_cast<size_t>(pos + 1)));
      b.add(s, pos, ids.data() + pos, 1);
    }
    const auto l = m.forward(b, cache.access());
    all.insert(all.end(), l.begin(), l.end());
  }
  return all;
}

// Two sequences of lengths drawn from `seed` (one past a 256-token block, one short), random ids, three
// decode steps: a run whose shape differs from seed to seed.
inline std::vector<float> seeded_prefill_then_decode(Model& m, Device& dev, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t lens[2] = {130 + static_cast<int64_t>(rng() % 140), 40 + static_cast<int64_t>(rng() % 40)};
  std::vector<int32_t> ids(400);
  for (auto& x : ids) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(m.config().vocab_size));
  return prefill_then_decode(m, dev, lens, ids, 3);
}

}  // namespace dsv4::testing
