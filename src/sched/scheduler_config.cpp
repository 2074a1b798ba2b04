#include "sched/scheduler_config.h"

#include "core/error.h"

namespace dsv4 {

std::string_view chunk_policy_name(ChunkPolicy p) { return p == ChunkPolicy::kLatency ? "latency" : "budget"; }

ChunkPolicy parse_chunk_policy(std::string_view name) {
  if (name == "latency") return ChunkPolicy::kLatency;
  if (name == "budget") return ChunkPolicy::kBudget;
  fail("unknown chunked prefill policy \"{}\" (known: latency, budget)", name);
}

std::string_view scheduling_policy_name(SchedulingPolicy p) {
  return p == SchedulingPolicy::kFcfs ? "fcfs" : "priority";
}

SchedulingPolicy parse_scheduling_policy(std::string_view name) {
  if (name == "fcfs") return SchedulingPolicy::kFcfs;
  if (name == "priority") return SchedulingPolicy::kPriority;
  fail("unknown scheduling policy \"{}\" (known: fcfs, priority)", name);
}

}  // namespace dsv4
