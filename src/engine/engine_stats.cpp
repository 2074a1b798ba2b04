#include "engine/engine_stats.h"

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

double EngineStats::kv_usage() const {
  double used = 0, capacity = 0;
  for (const auto& p : pools) {
    used += static_cast<double>(p.used_pages * p.page_bytes);
    capacity += static_cast<double>(p.capacity_pages * p.page_bytes);
  }
  return capacity > 0 ? used / capacity : 0;
}

}  // namespace dsv4
