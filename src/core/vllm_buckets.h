// The histogram bounds vLLM's Prometheus logger uses (vllm/v1/metrics/loggers.py), so that its dashboards'
// quantiles read the same on dsv4: latencies in seconds, token counts on a 1-2-5 scale up to the context.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace dsv4::vllm_buckets {

std::span<const double> ttft();              // time to first token
std::span<const double> inter_token();       // inter-token latency, time per output token
std::span<const double> request_latency();   // e2e, queue, prefill, decode, inference
std::span<const double> iteration_tokens();  // tokens of one engine step
std::span<const double> params_n();          // the n request parameter
// 1, 2, 5, 10, 20, 50, ... up to max_value (vLLM's build_1_2_5_buckets).
std::vector<double> one_two_five(int64_t max_value);

}  // namespace dsv4::vllm_buckets
