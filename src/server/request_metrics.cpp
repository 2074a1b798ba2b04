#include "server/request_metrics.h"

#include <array>

namespace dsv4::server {
namespace {

// vLLM's buckets (vllm/v1/metrics/loggers.py), so its dashboards' quantiles read the same.
constexpr std::array<double, 22> kTtftBuckets = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                                 0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                                 20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
constexpr std::array<double, 19> kItlBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                                0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
constexpr std::array<double, 21> kE2eBuckets = {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
                                                30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

}  // namespace

RequestMetrics::RequestMetrics() {
  s_.ttft = Histogram(kTtftBuckets);
  s_.itl = Histogram(kItlBuckets);
  s_.e2e = Histogram(kE2eBuckets);
}

void RequestMetrics::observe_ttft(double seconds) {
  std::lock_guard lock(mu_);
  s_.ttft.observe(seconds);
}

void RequestMetrics::observe_itl(double seconds, uint64_t tokens) {
  if (tokens == 0) return;
  std::lock_guard lock(mu_);
  s_.itl.observe(seconds / static_cast<double>(tokens), tokens);
}

void RequestMetrics::observe_e2e(double seconds) {
  std::lock_guard lock(mu_);
  s_.e2e.observe(seconds);
}

void RequestMetrics::count_finished(std::string_view reason) {
  std::lock_guard lock(mu_);
  ++s_.finished[std::string(reason)];
}

void RequestMetrics::count_rejected() {
  std::lock_guard lock(mu_);
  ++s_.rejected;
}

RequestMetrics::Snapshot RequestMetrics::snapshot() const {
  std::lock_guard lock(mu_);
  return s_;
}

}  // namespace dsv4::server
