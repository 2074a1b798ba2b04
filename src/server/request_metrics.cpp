#include "server/request_metrics.h"

#include "core/vllm_buckets.h"

namespace dsv4::server {
RequestMetrics::RequestMetrics() {
  s_.ttft = Histogram(vllm_buckets::ttft());
  s_.itl = Histogram(vllm_buckets::inter_token());
  s_.e2e = Histogram(vllm_buckets::request_latency());
  s_.params_n = Histogram(vllm_buckets::params_n());
}

void RequestMetrics::observe_request(int64_t n, int64_t max_generation_tokens, int64_t max_model_len) {
  std::lock_guard lock(mu_);
  s_.params_n.observe(static_cast<double>(n));
  // vLLM's bounds run up to max_model_len, which is known only once the model has loaded.
  if (s_.max_num_generation_tokens.bounds.empty()) {
    s_.max_num_generation_tokens = Histogram(vllm_buckets::one_two_five(max_model_len));
  }
  s_.max_num_generation_tokens.observe(static_cast<double>(max_generation_tokens));
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
