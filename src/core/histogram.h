// A Prometheus-style histogram: fixed upper bounds, a count per bucket (non-cumulative here; the text
// writer accumulates), the sum and the count of observations. Not thread-safe (its owner locks). It lives
// in core because both the engine (request phases, step sizes) and the server (latencies) fill one.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace dsv4 {

struct Histogram {
  std::vector<double> bounds;    // ascending upper bounds; +Inf is implicit
  std::vector<uint64_t> counts;  // bounds.size() + 1 (the last is +Inf)
  double sum = 0;
  uint64_t count = 0;

  explicit Histogram(std::span<const double> upper_bounds = {})
      : bounds(upper_bounds.begin(), upper_bounds.end()), counts(bounds.size() + 1, 0) {}

  void observe(double v, uint64_t times = 1);
  // Adds another histogram of the same bounds (throws dsv4::Error for other bounds).
  void merge(const Histogram& o);
};

}  // namespace dsv4
