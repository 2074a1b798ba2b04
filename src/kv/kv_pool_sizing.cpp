#include "kv/kv_pool_sizing.h"

#include <cmath>
#include <limits>

#include "core/error.h"

namespace dsv4 {

namespace {

// The sliding units' pages (per bucket) and bytes, and what one 256-position block of every full unit takes.
struct PoolCosts {
  std::vector<int64_t> sliding_pages;
  int64_t reserve = 0;
  double full_bytes_per_block = 0;
};

PoolCosts pool_costs(const KvLayout& l, const KvPoolSizing& s) {
  DSV4_CHECK(s.max_num_seqs > 0 && s.max_num_batched_tokens > 0 && s.retention_windows >= 0,
             "KV pools: max_num_seqs ({}) and max_num_batched_tokens ({}) must be positive", s.max_num_seqs,
             s.max_num_batched_tokens);
  PoolCosts c;
  c.sliding_pages.assign(l.buckets.size(), 0);
  for (const KvUnit& u : l.units) {
    const int64_t page = l.buckets[static_cast<size_t>(u.bucket)].page_bytes;
    if (!u.sliding()) {
      c.full_bytes_per_block += static_cast<double>(u.num_layers() * page);
      continue;
    }
    const auto windows = static_cast<int64_t>(std::ceil(
        static_cast<double>(s.max_num_seqs) * (1.0 + s.retention_windows) * static_cast<double>(u.peak_pages)));
    const int64_t chunk = (s.max_num_batched_tokens + u.positions_per_page - 1) / u.positions_per_page + 1;
    const int64_t pages = (windows + chunk) * u.num_layers();
    c.sliding_pages[static_cast<size_t>(u.bucket)] += pages;
    c.reserve += pages * page;
  }
  return c;
}

}  // namespace

int64_t kv_pools_bytes_for(const KvLayout& l, const KvPoolSizing& s, int64_t full_blocks) {
  const PoolCosts c = pool_costs(l, s);
  const double bytes =
      static_cast<double>(c.reserve) + std::ceil(c.full_bytes_per_block * static_cast<double>(full_blocks));
  // Saturating: a million positions for many requests outgrows any GPU, and int64.
  return bytes >= 9e18 ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(bytes) + 1;
}

KvPoolSplit size_kv_pools(const KvLayout& l, int64_t kv_memory, const KvPoolSizing& s) {
  const PoolCosts c = pool_costs(l, s);
  KvPoolSplit split;
  split.pages = c.sliding_pages;
  const int64_t reserve = c.reserve;
  DSV4_CHECK(reserve < kv_memory,
             "KV pools: {} B of KV memory cannot hold the sliding windows of {} sequences ({} B) and any compressed "
             "entries",
             kv_memory, s.max_num_seqs, reserve);
  const int64_t blocks = c.full_bytes_per_block > 0
                             ? static_cast<int64_t>(static_cast<double>(kv_memory - reserve) / c.full_bytes_per_block)
                             : 0;
  for (const KvUnit& u : l.units) {
    if (!u.sliding()) split.pages[static_cast<size_t>(u.bucket)] += blocks * u.num_layers();
  }
  split.full_tokens = blocks * kKvBlockTokens;
  for (size_t b = 0; b < l.buckets.size(); ++b) split.bytes += split.pages[b] * l.buckets[b].page_bytes;
  return split;
}

}  // namespace dsv4
