// Splits a KV memory budget into the pools of a layout (serve's --kv-cache-memory).
//
// Sliding units need pages per running request, full units pages per token, and each pool is a fixed
// share of memory, so the split follows the serving limits: every sliding unit gets room for
// max_num_seqs live windows plus as many retained ones (retention_windows per request) plus one
// prefill chunk in flight; what is left is shared by the full units in proportion to their bytes per
// token, so that all of them hold the same number of tokens.
#pragma once

#include <cstdint>
#include <vector>

#include "kv/kv_layout.h"

namespace dsv4 {

// The engine always sets both limits from EngineConfig (engine/cache_sizing.cpp); these defaults are only
// a V4-Flash serving reference for planning and tests, not the engine's defaults.
struct KvPoolSizing {
  int64_t max_num_seqs = 256;
  int64_t max_num_batched_tokens = 8192;
  double retention_windows = 1.0;  // retained prefix-cache windows per running request
};

struct KvPoolSplit {
  std::vector<int64_t> pages;  // per bucket
  int64_t full_tokens = 0;     // tokens the full units can hold in all
  int64_t bytes = 0;           // what the pools take (<= the budget)
};

// Throws dsv4::Error naming the numbers when the budget does not cover the sliding reserve.
KvPoolSplit size_kv_pools(const KvLayout& layout, int64_t kv_memory, const KvPoolSizing& sizing = {});

// The KV memory whose split holds `full_blocks` 256-position blocks in every full unit beside the sliding
// reserve: size_kv_pools of it gives at least that many.
int64_t kv_pools_bytes_for(const KvLayout& layout, const KvPoolSizing& sizing, int64_t full_blocks);

}  // namespace dsv4
