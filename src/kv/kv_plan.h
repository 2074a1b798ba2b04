// Capacity planning: what one request of a given context costs in KV memory (dsv4 kv-plan).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kv/kv_layout.h"

namespace dsv4 {

inline constexpr int64_t kDefaultKvMemory = int64_t{100} << 30;  // 100 GiB
// A V3.2-style layer (656-byte FP8 MLA entry + 132-byte FP8 indexer key per token), for comparison.
inline constexpr int64_t kV32BytesPerTokenPerLayer = 656 + 132;

struct KvGroupPlan {
  std::string name;
  int layers = 0;
  int64_t entry_bytes = 0;
  int64_t entries_per_page = 0;
  int64_t page_bytes = 0;  // this group's entries in one layer page (entries_per_page · entry_bytes)
  double bytes_per_token = 0;
  int64_t fixed_bytes = 0;
  std::string unit;
  int bucket = 0;
};

struct KvBucketPlan {
  int64_t page_bytes = 0;
  std::vector<std::string> units;
  int64_t pages_per_sequence = 0;  // layer pages one request of the planned context holds
};

struct KvUnitPlan {
  std::string name;
  int64_t positions_per_page = 0;
  int64_t pages_per_sequence = 0;  // block ids per request (each holds one layer page per layer)
  int64_t allocated_bytes = 0;
  double waste = 0;
};

struct KvPlan {
  KvDTypes dtypes;
  int64_t context = 0;
  int64_t kv_memory = 0;
  double bytes_per_token = 0;      // growth per token over all main layers
  int64_t fixed_bytes = 0;         // windows and compressor states of one request
  int64_t per_sequence_bytes = 0;  // ceil(bytes_per_token · context) + fixed_bytes
  int64_t allocated_bytes = 0;     // what the pools charge, page rounding included
  int64_t max_sequences = 0;       // floor(kv_memory / allocated_bytes)
  int64_t v32_estimate_bytes = 0;  // (656 + 132) · main layers · context
  double max_waste = 0;
  std::vector<KvGroupPlan> groups;
  std::vector<KvUnitPlan> units;
  std::vector<KvBucketPlan> buckets;
};

// Throws dsv4::Error for a context or memory that is not positive.
KvPlan make_kv_plan(const ModelConfig& c, KvDTypes dtypes, int64_t context, int64_t kv_memory = kDefaultKvMemory);

}  // namespace dsv4
