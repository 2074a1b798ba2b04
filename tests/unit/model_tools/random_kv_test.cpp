// bench step's random KV fill: every slot of every table holds a valid entry (finite values, not
// zero), pages differ, and the same seed gives the same bytes.
#include "model_tools/random_kv.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/device.h"
#include "core/kv_entry.h"
#include "model/dense_kv.h"
#include "model/paged_kv.h"
#include "model_tools/presets.h"

namespace dsv4 {
namespace {

// Every (layer, kind) table of the cache as (table, dims).
std::vector<std::pair<EntryTable, KvEntryDims>> tables_of(const ModelConfig& c, const KvAccess& kv) {
  std::vector<std::pair<EntryTable, KvEntryDims>> out;
  for (int l = 0; l < c.n_layers; ++l) {
    const int ratio = c.compress_ratio(l);
    for (int k = 0; k < 5; ++k) {
      const auto kind = static_cast<KvKind>(k);
      if (kv_kind_applies(kind, ratio)) out.emplace_back(kv.table(l, kind), kv_entry_dims(c, ratio, kind));
    }
  }
  return out;
}

TEST(RandomKv, EverySlotHoldsAValidNonZeroEntry) {
  const ModelConfig& c = find_preset("tiny").config;
  HostDevice dev;
  OwnedPagedCache cache(c, 2, 1024, 512, KvDTypes{}, &dev);
  fill_random_kv(c, cache.access(), dev, 7);
  int64_t slots = 0;
  for (const auto& [t, d] : tables_of(c, cache.access())) {
    std::vector<float> v(static_cast<size_t>(d.dim));
    for (int64_t s = 0; s < t.capacity; ++s) {
      decode_kv_entry(t.format, d, std::span<const uint8_t>(t.entry(s), static_cast<size_t>(t.entry_bytes)), v);
      double sum = 0;
      for (float x : v) {
        ASSERT_TRUE(std::isfinite(x)) << kv_entry_format_name(t.format) << " slot " << s;
        sum += std::fabs(x);
      }
      ASSERT_GT(sum, 0) << kv_entry_format_name(t.format) << " slot " << s << " is zero";
      ++slots;
    }
    if (t.capacity >= 2 * t.entries_per_page) {  // two pages' first entries differ
      EXPECT_NE(std::memcmp(t.entry(0), t.entry(t.entries_per_page), static_cast<size_t>(t.entry_bytes)), 0);
    }
  }
  EXPECT_GT(slots, 0);
}

TEST(RandomKv, TheSeedDecidesTheBytes) {
  const ModelConfig& c = find_preset("tiny").config;
  HostDevice dev;
  OwnedPagedCache a(c, 1, 512, 256, KvDTypes{}, &dev), b(c, 1, 512, 256, KvDTypes{}, &dev),
      other(c, 1, 512, 256, KvDTypes{}, &dev);
  fill_random_kv(c, a.access(), dev, 3);
  fill_random_kv(c, b.access(), dev, 3);
  fill_random_kv(c, other.access(), dev, 4);
  const auto ta = tables_of(c, a.access()), tb = tables_of(c, b.access()), to = tables_of(c, other.access());
  bool any_differs = false;
  for (size_t i = 0; i < ta.size(); ++i) {
    const EntryTable& x = ta[i].first;
    const size_t n = static_cast<size_t>(x.entry_bytes);
    EXPECT_EQ(std::memcmp(x.entry(0), tb[i].first.entry(0), n), 0);
    any_differs |= std::memcmp(x.entry(0), to[i].first.entry(0), n) != 0;
  }
  EXPECT_TRUE(any_differs);
}

}  // namespace
}  // namespace dsv4
