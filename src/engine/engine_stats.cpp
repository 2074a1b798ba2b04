#include "engine/engine_stats.h"

#include <algorithm>

#include "core/error.h"

namespace dsv4 {

void StepTimes::add(double seconds) {
  ++count;
  total_seconds += seconds;
  last_seconds = seconds;
  if (seconds > max_seconds) max_seconds = seconds;
  size_t b = 0;
  while (b < kBuckets.size() && seconds > kBuckets[b]) ++b;
  ++buckets[b];
}

void StepTimes::merge(const StepTimes& o) {
  schedule_seconds += o.schedule_seconds;
  execute_seconds += o.execute_seconds;
  outputs_seconds += o.outputs_seconds;
  execute_wait_seconds += o.execute_wait_seconds;
  graph_steps += o.graph_steps;
  graph_execute_seconds += o.graph_execute_seconds;
  graph_wait_seconds += o.graph_wait_seconds;
  graph_index_seconds += o.graph_index_seconds;
  graph_launch_seconds += o.graph_launch_seconds;
  count += o.count;
  total_seconds += o.total_seconds;
  last_seconds = std::max(last_seconds, o.last_seconds);
  max_seconds = std::max(max_seconds, o.max_seconds);
  for (size_t b = 0; b < buckets.size(); ++b) buckets[b] += o.buckets[b];
}

double EngineStats::kv_usage() const {
  double used = 0, capacity = 0;
  for (const auto& p : pools) {
    used += static_cast<double>(p.used_pages * p.page_bytes);
    capacity += static_cast<double>(p.capacity_pages * p.page_bytes);
  }
  return capacity > 0 ? used / capacity : 0;
}

namespace {

// a.m += b.m for each member m.
template <typename S, typename... M>
void add(S& a, const S& b, M S::*... m) {
  ((a.*m += b.*m), ...);
}

void add_pool(KvPoolUsage& a, const KvPoolUsage& b) {
  DSV4_CHECK(a.page_bytes == b.page_bytes, "engine stats: pools of {} and {} B pages", a.page_bytes, b.page_bytes);
  using P = KvPoolUsage;
  add(a, b, &P::capacity_pages, &P::used_pages, &P::cached_pages, &P::free_pages);
}

void add_group(KvGroupUsage& a, const KvGroupUsage& b) {
  DSV4_CHECK(a.name == b.name, "engine stats: groups {} and {}", a.name, b.name);
  using G = KvGroupUsage;
  add(a, b, &G::used_pages, &G::lookups, &G::hits, &G::query_tokens, &G::hit_tokens, &G::cached_blocks,
      &G::host_offloaded_blocks, &G::host_restored_blocks, &G::host_offload_bytes, &G::host_restore_bytes);
}

void add_host_tier(KvHostTierUsage& a, const KvHostTierUsage& b) {
  using H = KvHostTierUsage;
  add(a, b, &H::capacity_bytes, &H::used_bytes, &H::hits, &H::restored_tokens, &H::offload_bytes, &H::restore_bytes);
  a.evictions += b.evictions;
  a.restore_seconds.merge(b.restore_seconds);
  a.restore_copy_seconds += b.restore_copy_seconds;
}

}  // namespace

void EngineStats::merge(const EngineStats& o) {
  DSV4_CHECK(pools.size() == o.pools.size() && groups.size() == o.groups.size(),
             "engine stats: replicas with {} and {} pools, {} and {} groups", pools.size(), o.pools.size(),
             groups.size(), o.groups.size());
  using E = EngineStats;
  healthy = healthy && o.healthy;
  add(*this, o, &E::running, &E::waiting, &E::preempted_waiting, &E::prompt_tokens, &E::cached_prompt_tokens,
      &E::computed_tokens, &E::generation_tokens, &E::prefix_query_tokens, &E::prefix_hit_tokens);
  add(*this, o, &E::preemptions, &E::requests_added, &E::requests_finished, &E::requests_aborted, &E::requests_failed,
      &E::failed_steps, &E::idle_steps);
  if (device_memory_used >= 0 && o.device_memory_used >= 0) {  // each replica its own device
    add(*this, o, &E::device_memory_used, &E::device_memory_peak);
  } else {
    device_memory_used = std::max(device_memory_used, o.device_memory_used);
    device_memory_peak = std::max(device_memory_peak, o.device_memory_peak);
  }
  steps.merge(o.steps);
  for (size_t i = 0; i < pools.size(); ++i) add_pool(pools[i], o.pools[i]);
  for (size_t i = 0; i < groups.size(); ++i) add_group(groups[i], o.groups[i]);
  add_host_tier(host_tier, o.host_tier);
  using S = StepGraphStats;
  add(graphs, o.graphs, &S::eager, &S::recorded, &S::replayed, &S::dropped, &S::failed);
  requests.merge(o.requests);
  iteration_tokens.merge(o.iteration_tokens);
}

}  // namespace dsv4
