#include "core/histogram.h"

#include <algorithm>

#include "core/error.h"

namespace dsv4 {

void Histogram::observe(double v, uint64_t times) {
  // Prometheus buckets are "less than or equal to" their bound.
  const auto it = std::lower_bound(bounds.begin(), bounds.end(), v);
  counts[static_cast<size_t>(it - bounds.begin())] += times;
  sum += v * static_cast<double>(times);
  count += times;
}

void Histogram::merge(const Histogram& o) {
  DSV4_CHECK(o.bounds == bounds, "histogram: merging one of {} buckets into one of {} with other bounds",
             o.bounds.size(), bounds.size());
  for (size_t i = 0; i < counts.size(); ++i) counts[i] += o.counts[i];
  sum += o.sum;
  count += o.count;
}

}  // namespace dsv4
