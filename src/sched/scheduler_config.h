// Scheduler options (filled by the engine from EngineConfig; the engine flags in the end). These defaults
// are the engine's too: EngineConfig takes them from here, so each is stated once.
#pragma once

#include <cstdint>
#include <string_view>

namespace dsv4 {

// How prefill tokens share a step with running decodes.
enum class ChunkPolicy : uint8_t {
  // Default. While decodes run, a step takes only as many prefill tokens as keep its measured cost within
  // max((1 + itl_slack) x a decode-only step, itl_target_ms) (PrefillPacer), so running streams keep
  // their pace while long prompts prefill; with no decodes running, prefills take the whole budget.
  kLatency,
  // vLLM's: prefills take whatever the token budget leaves after the decodes.
  kBudget,
};

std::string_view chunk_policy_name(ChunkPolicy p);
ChunkPolicy parse_chunk_policy(std::string_view name);  // "latency" | "budget"; throws listing them

// Which request goes first (vLLM's --scheduling-policy): arrival order, or each request's priority (lower
// first; equal priorities in arrival order) for admission, resumption and, in reverse, preemption.
enum class SchedulingPolicy : uint8_t { kFcfs, kPriority };

std::string_view scheduling_policy_name(SchedulingPolicy p);
SchedulingPolicy parse_scheduling_policy(std::string_view name);  // "fcfs" | "priority"; throws listing them

struct SchedulerConfig {
  int64_t max_num_seqs = 256;             // running requests at most
  int64_t max_num_batched_tokens = 2048;  // tokens of one step at most
  ChunkPolicy policy = ChunkPolicy::kLatency;
  int64_t max_prefill_chunk = 0;  // cap on one request's prefill chunk per step (0 = none)
  // kLatency: allowed extra step time over a decode-only step. 0.4 leaves room for noise under the 2x p99
  // goal (bench/engine_bench.cpp measures it).
  double itl_slack = 0.4;
  // kLatency: a step with prefill may also take up to this long (ms; 0: the slack alone). Where decode
  // steps are fast the slack alone leaves prompts a few tokens a step and starves them (a GPU burst of
  // 16 prompts: docs/perf-history.md, session 5); 150 ms keeps inter-token latency under the 200 ms p99
  // that serving asks for, with room for noise.
  double itl_target_ms = 150;
  SchedulingPolicy scheduling = SchedulingPolicy::kFcfs;
};

}  // namespace dsv4
