// EngineConfig: every option of the engine in one struct; `dsv4 serve`, `dsv4 generate` and `dsv4 bench
// latency` fill it from the engine flags (tools/engine_flags.h: same names with dashes, --max-num-seqs,
// --kv-cache-memory, ...), whose defaults are this struct's default-constructed values. Zero means "the
// default". Each default is stated once: the scheduling ones are SchedulerConfig's and the prefix-caching
// ones KvCacheOptions' (the layers that use them), the rest here; the server takes max_num_seqs from here.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "kv/kv_cache_manager.h"
#include "kv/kv_dtype.h"
#include "model/parallel_layout.h"
#include "sched/scheduler_config.h"

namespace dsv4 {

// The CPU backend's default max_model_len. CPU prefill slows as the context grows (docs/perf-history.md, "CPU
// prefill of the serve preset"): one prompt of the model's 1M positions would hold the engine for hours,
// one of 16K for a minute or two on a small machine. --max-model-len raises it.
inline constexpr int64_t kCpuDefaultMaxModelLen = 16384;

// --kv-offload-bytes auto.
inline constexpr int64_t kKvOffloadAuto = -1;

struct EngineConfig {
  std::string backend = "cpu";
  int threads = 0;  // CPU backend threads (0 = all cores)
  // "exact" | "fast" (spec/NUMERICS.md); empty: the backend's default. Set to the tier in use by the engine.
  std::string numerics;

  int64_t max_num_seqs = SchedulerConfig{}.max_num_seqs;
  // 0 = the backend's default (resolve_max_num_batched_tokens): vLLM's for its OpenAI server, 8192 on a GPU
  // of at least 70 GiB and 2048 elsewhere. Set to the value in use by the engine.
  int64_t max_num_batched_tokens = 0;
  // 0 = min(the model's max_position_embeddings, the largest one request the KV cache holds, and on the CPU
  // backend kCpuDefaultMaxModelLen), with a warning when the cache is the limit; an explicit value the cache
  // cannot hold is refused.
  int64_t max_model_len = 0;
  // Bytes of KV pools; 0 = the backend's default: CPU min(4 GiB, 25% of RAM); GPU what
  // gpu_memory_utilization of its memory leaves after the weights and the activation reserve.
  int64_t kv_cache_memory = 0;
  // Bytes of host memory for the prefix cache's second tier (kv/host_tier.h; pinned on a GPU); 0 = off;
  // kKvOffloadAuto = half the host memory available when the engine starts (resolve_kv_offload_bytes).
  int64_t kv_offload_bytes = 0;
  double gpu_memory_utilization = 0.9;
  int64_t weight_bytes = 0;  // set by the engine: device bytes of the placed weights
  int64_t block_size = 256;  // only 256 (the cache's logical block)
  KvDTypes kv_dtypes;

  bool enable_prefix_caching = KvCacheOptions{}.enable_prefix_caching;
  // vLLM's semantics (kv_cache_manager.h)
  int64_t prefix_cache_retention_interval = KvCacheOptions{}.retention_interval;

  ChunkPolicy chunked_prefill_policy = SchedulerConfig{}.policy;
  // One request's prefill tokens per step at most (0 = no cap).
  int64_t max_prefill_chunk = SchedulerConfig{}.max_prefill_chunk;
  // kLatency: a step with prefill may take (1 + slack) x a decode step (scheduler_config.h says why 0.4).
  double itl_slack = SchedulerConfig{}.itl_slack;
  // kLatency: a step with prefill may also take up to this long (ms; scheduler_config.h says why 150).
  double itl_target_ms = SchedulerConfig{}.itl_target_ms;
  // Which waiting request starts first: arrival order, or the requests' priorities (vLLM's flag).
  SchedulingPolicy scheduling_policy = SchedulerConfig{}.scheduling;

  // Tensor, data and expert parallelism (model/parallel_layout.h).
  ParallelConfig parallel;
  // How long a rank waits in a collective for a peer that does not come before its step fails (a slow
  // CPU prefill must fit; a rank that fails aborts its peers at once). Not a flag: tests shorten it.
  std::chrono::milliseconds collective_timeout = std::chrono::minutes(10);

  // Decode steps run eagerly instead of being recorded once per batch shape and replayed (CUDA graphs).
  bool enforce_eager = false;

  // Ids at or above this are never sampled: the tokenizer's vocabulary size (0 = the model's vocab_size).
  int64_t vocab_limit = 0;

  SchedulerConfig scheduler() const {
    return {max_num_seqs, max_num_batched_tokens, chunked_prefill_policy, max_prefill_chunk,
            itl_slack,    itl_target_ms,          scheduling_policy};
  }
};

}  // namespace dsv4
