// A request as the scheduler sees it: its token ids (the prompt, then every generated token) and how
// many of them have KV state in the cache. Sampling, stop conditions and output streams are the engine's.
//
// Lifecycle: kWaiting -> kRunning -> (kPreempted -> kRunning)* -> kFinished | kAborted. A preempted request
// lost its blocks (preemption by recompute): it waits again, ahead of new requests, and recomputes every
// token it has, the generated ones included, before it samples again.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dsv4 {

using RequestId = uint64_t;

enum class RequestStatus : uint8_t { kWaiting, kRunning, kPreempted, kFinished, kAborted };

std::string_view request_status_name(RequestStatus s);

struct SchedRequest {
  RequestId id = 0;
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  int64_t prompt_len = 0;
  int64_t num_computed = 0;        // positions whose KV state is (or is being) written
  int64_t num_cached_prompt = -1;  // prompt tokens the prefix cache served at first admission; -1 before
  int64_t num_preemptions = 0;
  uint64_t arrival = 0;  // FCFS order: lower runs first and is preempted last
  int64_t priority = 0;  // the priority policy: lower runs first; equal priorities go by arrival
  RequestStatus status = RequestStatus::kWaiting;
  bool registered = false;      // known to the KV cache manager (add_request done, not freed since)
  bool compute_prompt = false;  // no prefix-cache hit: every prompt position's logits are wanted
  std::string cache_salt;

  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
  int64_t num_output() const { return num_tokens() - prompt_len; }
  // Tokens to compute before the next token can be sampled.
  int64_t pending() const { return num_tokens() - num_computed; }
  // Decoding: the prompt and every generated token but the newest are computed.
  bool decoding() const { return pending() == 1 && num_computed >= prompt_len; }
};

// The scheduling order: lower priority first, then earlier arrival (FCFS when every priority is 0).
inline bool runs_before(const SchedRequest& a, const SchedRequest& b) {
  return a.priority != b.priority ? a.priority < b.priority : a.arrival < b.arrival;
}

}  // namespace dsv4
