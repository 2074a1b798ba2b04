// Schedule: the scheduler's only output to the model runner, one per step. Plain data: which tokens of
// which requests to compute, at which positions. Their KV positions are already allocated in the cache.
#pragma once

#include <cstdint>
#include <vector>

#include "sched/request.h"

namespace dsv4 {

struct ScheduledChunk {
  RequestId id = 0;
  int64_t start = 0;            // position of tokens.front()
  std::vector<int32_t> tokens;  // ids of positions [start, start + tokens.size())
  bool sample = false;          // ends at the request's newest token: sample the next one from its logits
  bool decode = false;          // one token after a computed context (for step-cost accounting)
};

struct Schedule {
  std::vector<ScheduledChunk> chunks;  // in priority order (oldest request first)
  std::vector<RequestId> preempted;    // lost their blocks this step; they recompute later
  int64_t num_decode_tokens = 0;
  int64_t num_prefill_tokens = 0;

  bool empty() const { return chunks.empty(); }
  int64_t num_tokens() const { return num_decode_tokens + num_prefill_tokens; }
};

}  // namespace dsv4
