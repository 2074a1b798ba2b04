#include "model_tools/random_kv.h"

#include <map>
#include <random>
#include <set>
#include <span>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/kv_entry.h"
#include "model/dense_kv.h"

namespace dsv4 {
namespace {

// Distinct entries a format and dims: a page's entries are a run of them from a random start, so
// neighbouring pages differ and a long context repeats each entry rarely.
constexpr int64_t kTemplates = 4096;

// `count` entries encoded from values drawn from N(0, 1), back to back in device memory.
DeviceArray<uint8_t> encoded_entries(Device& dev, KvEntryFormat f, KvEntryDims d, int64_t count, std::mt19937& rng) {
  const int64_t bytes = kv_entry_bytes(f, d);
  std::vector<uint8_t> host(static_cast<size_t>(count * bytes));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(d.dim));
  for (int64_t i = 0; i < count; ++i) {
    for (float& x : v) x = nd(rng);
    encode_kv_entry(f, d, v, std::span<uint8_t>(host.data() + i * bytes, static_cast<size_t>(bytes)));
  }
  return DeviceArray<uint8_t>(dev, host);
}

}  // namespace

void fill_random_kv(const ModelConfig& c, const KvAccess& kv, Device& dev, uint32_t seed) {
  std::mt19937 rng(seed);
  std::set<const uint8_t*> filled;  // pool members several layers share
  std::map<std::tuple<int, int, int, int64_t>, DeviceArray<uint8_t>> made;
  for (int l = 0; l < c.n_layers; ++l) {
    const int ratio = c.compress_ratio(l);
    for (int k = 0; k < 5; ++k) {
      const auto kind = static_cast<KvKind>(k);
      if (!kv_kind_applies(kind, ratio)) continue;
      const EntryTable t = kv.table(l, kind);
      if (t.capacity == 0 || !filled.insert(t.base).second) continue;
      const KvEntryDims d = kv_entry_dims(c, ratio, kind);
      DSV4_CHECK(t.entry_bytes == kv_entry_bytes(t.format, d), "random kv: layer {} kind {}: entry size mismatch", l,
                 k);
      const int64_t per_page = t.entries_per_page, count = std::max(kTemplates, 2 * per_page);
      const auto key = std::make_tuple(static_cast<int>(t.format), d.dim, d.rope_dim, count);
      auto it = made.find(key);
      if (it == made.end()) it = made.emplace(key, encoded_entries(dev, t.format, d, count, rng)).first;
      const uint8_t* src = it->second.data();
      std::uniform_int_distribution<int64_t> start(0, count - per_page);
      for (int64_t p = 0; p < t.capacity / per_page; ++p) {
        dev.copy(t.base + p * t.page_bytes, src + start(rng) * t.entry_bytes,
                 static_cast<size_t>(per_page * t.entry_bytes));
      }
    }
  }
  dev.synchronize();
}

}  // namespace dsv4
