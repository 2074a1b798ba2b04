// EngineStats: a snapshot for metrics (/metrics, logs), published by the engine thread after every step
// (a stream may see its end a moment before the snapshot counts it).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/histogram.h"
#include "core/vllm_buckets.h"
#include "engine/request_phases.h"
#include "model/step_shape.h"

namespace dsv4 {

struct KvPoolUsage {
  int64_t page_bytes = 0;
  int64_t capacity_pages = 0;
  int64_t used_pages = 0;    // held by requests
  int64_t cached_pages = 0;  // prefix cache, evictable
  int64_t free_pages = 0;
  double usage() const { return capacity_pages > 0 ? static_cast<double>(used_pages) / capacity_pages : 0; }
};

struct KvGroupUsage {
  std::string name;
  int pool = 0;
  // Layer pages the running requests hold in this group's unit (a shared prefix block counts once).
  // Refreshed at most every 100 ms: counting is proportional to the blocks held.
  int64_t used_pages = 0;
  int64_t lookups = 0;        // prefix-cache lookups claimed by admissions
  int64_t hits = 0;           // lookups that hit something in this group
  int64_t query_tokens = 0;   // prompt tokens looked up
  int64_t hit_tokens = 0;     // tokens this group alone could have served
  int64_t cached_blocks = 0;  // blocks kept only for the prefix cache (sliding: retained checkpoints)
  // Host tier: the unit's blocks copied out and brought back, and this group's bytes of them.
  int64_t host_offloaded_blocks = 0, host_restored_blocks = 0;
  int64_t host_offload_bytes = 0, host_restore_bytes = 0;
  double hit_rate() const { return query_tokens > 0 ? static_cast<double>(hit_tokens) / query_tokens : 0; }
};

// Step durations (the whole step: schedule, forward, sampling, outputs) as a Prometheus-style histogram.
struct StepTimes {
  static constexpr std::array<double, 12> kBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                      0.1,   0.25,   0.5,   1,    2.5,   10};
  int64_t count = 0;
  double total_seconds = 0;
  double last_seconds = 0;
  double max_seconds = 0;
  std::array<int64_t, kBuckets.size() + 1> buckets{};  // non-cumulative; the last is +Inf
  // Of total_seconds: making the schedule, the executor's step (batch, forward, sampling, the tokens back)
  // and applying its tokens (stop checks, streams): where a step's host time goes beside the forward.
  double schedule_seconds = 0, execute_seconds = 0, outputs_seconds = 0;
  // Of execute_seconds: the engine thread blocked on its device (Device::waited_seconds; 0 on the CPU,
  // whose work is host work): execute_seconds less this is the step's host work beside the forward.
  double execute_wait_seconds = 0;
  // The steps replayed (or recorded) from CUDA graphs, apart: their count, execute and wait time, and of
  // that the host's index build and graph launch (StepGraphStats); execute less the other three is the
  // host work a decode step does beside them (batch, sampling, the ids back).
  int64_t graph_steps = 0;
  double graph_execute_seconds = 0, graph_wait_seconds = 0, graph_index_seconds = 0, graph_launch_seconds = 0;

  void add(double seconds);
  void merge(const StepTimes& o);
};

// The prefix cache's host tier (--kv-offload-bytes; all 0 when off).
struct KvHostTierUsage {
  int64_t capacity_bytes = 0, used_bytes = 0;
  int64_t hits = 0;             // lookups that brought blocks back
  int64_t restored_tokens = 0;  // prefix positions found only thanks to the tier
  int64_t offload_bytes = 0, restore_bytes = 0;
  uint64_t evictions = 0;           // entries dropped for room
  Histogram restore_seconds;        // each restore: allocated, copied back, copies finished
  double restore_copy_seconds = 0;  // the restores' copies alone (restore_bytes over it: their bandwidth)
};

struct EngineStats {
  bool healthy = true;
  int64_t running = 0;
  int64_t waiting = 0;            // preempted ones included
  int64_t preempted_waiting = 0;  // preempted, waiting to resume
  uint64_t preemptions = 0;       // since start
  uint64_t requests_added = 0, requests_finished = 0, requests_aborted = 0, requests_failed = 0;
  uint64_t failed_steps = 0;
  uint64_t idle_steps = 0;           // steps of a replica with nothing scheduled, beside its peers' (expert parallel)
  int64_t prompt_tokens = 0;         // prompt tokens of admitted requests
  int64_t cached_prompt_tokens = 0;  // of which the prefix cache served
  int64_t computed_tokens = 0;       // positions run through the model (recomputation included)
  int64_t generation_tokens = 0;
  StepTimes steps;
  std::vector<KvPoolUsage> pools;
  std::vector<KvGroupUsage> groups;
  int64_t prefix_query_tokens = 0, prefix_hit_tokens = 0;  // all groups together
  // The backend's device memory in use now and the most since start (Device::MemoryUse: weights, KV pools,
  // workspace and a step's activations); -1 where the device does not count (the CPU).
  int64_t device_memory_used = -1, device_memory_peak = -1;
  KvHostTierUsage host_tier;
  StepGraphStats graphs;                                         // decode steps recorded and replayed (CUDA graphs)
  RequestHistograms requests;                                    // per ended request: phases and token counts
  Histogram iteration_tokens{vllm_buckets::iteration_tokens()};  // tokens computed per step
  // vLLM's CacheConfig as `vllm:cache_config_info` labels (engine/cache_config_info.h); set once, shared
  // by every snapshot.
  std::shared_ptr<const std::vector<std::pair<std::string, std::string>>> cache_config;

  double kv_usage() const;  // used / capacity over all pools, in bytes
  // Adds another data-parallel replica's snapshot: counts and histograms summed, pools and groups
  // summed index by index (every replica has the same layout), healthy only if both are.
  void merge(const EngineStats& o);
  double prefix_hit_rate() const {
    return prefix_query_tokens > 0 ? static_cast<double>(prefix_hit_tokens) / prefix_query_tokens : 0;
  }
};

}  // namespace dsv4
