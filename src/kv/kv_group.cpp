#include "kv/kv_group.h"

#include <algorithm>

#include "core/error.h"

namespace dsv4 {

int64_t KvGroupSpec::window_rows() const {
  if (kind == KvGroupKind::kFull) return 0;
  return block_window && overlap ? 2 * int64_t{window} : window;
}

double KvGroupSpec::bytes_per_token() const {
  if (kind == KvGroupKind::kSliding) return 0;
  return static_cast<double>(num_layers()) * static_cast<double>(entry_bytes) / ratio;
}

int64_t KvGroupSpec::fixed_bytes() const { return int64_t{num_layers()} * window_rows() * entry_bytes; }

std::vector<KvGroupSpec> kv_group_specs(const ModelConfig& c, KvDTypes dtypes) {
  std::vector<int> all, r4, r128;
  for (int i = 0; i < c.n_layers; ++i) {
    const int r = c.compress_ratio(i);
    DSV4_CHECK(r == 0 || r == 4 || r == 128, "KV groups: compress_ratios[{}] = {} (allowed: 0, 4, 128)", i, r);
    all.push_back(i);
    if (r == 4) r4.push_back(i);
    if (r == 128) r128.push_back(i);
  }
  DSV4_CHECK(c.window_size > 0, "KV groups: sliding_window must be positive, got {}", c.window_size);
  const int64_t attn = attention_entry_size(c, dtypes.cache);
  auto sliding = [](std::string name, const std::vector<int>& layers, int64_t bytes, int window, bool block,
                    bool overlap) {
    return KvGroupSpec{std::move(name), KvGroupKind::kSliding, 1, layers, bytes, window, block, overlap};
  };
  auto full = [](std::string name, const std::vector<int>& layers, int64_t bytes, int ratio) {
    return KvGroupSpec{std::move(name), KvGroupKind::kFull, ratio, layers, bytes};
  };
  std::vector<KvGroupSpec> g;
  g.push_back(sliding("swa", all, attn, c.window_size, false, false));
  if (!r4.empty()) {
    g.push_back(sliding("c4.state", r4, c4_state_row_size(c), 4, true, true));
    g.push_back(sliding("c4.index.state", r4, c4_index_state_row_size(c), 4, true, true));
    g.push_back(full("c4.kv", r4, attn, 4));
    g.push_back(full("c4.index", r4, indexer_entry_size(c, dtypes.indexer), 4));
  }
  if (!r128.empty()) {
    g.push_back(sliding("c128.state", r128, c128_state_row_size(c), 128, true, false));
    g.push_back(full("c128.kv", r128, attn, 128));
  }
  return g;
}

}  // namespace dsv4
