#include "core/histogram.h"

#include <algorithm>

namespace dsv4 {

void Histogram::observe(double v, uint64_t times) {
  // Prometheus buckets are "less than or equal to" their bound.
  const auto it = std::lower_bound(bounds.begin(), bounds.end(), v);
  counts[static_cast<size_t>(it - bounds.begin())] += times;
  sum += v * static_cast<double>(times);
  count += times;
}

}  // namespace dsv4
