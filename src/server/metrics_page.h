// The /metrics page: vLLM's metric families under their `vllm:` names (so existing dashboards and
// `vllm bench serve` work), then `dsv4:` gauges per KV pool and per KV group.
#pragma once

#include <span>
#include <string>

#include "engine/engine_stats.h"
#include "server/request_metrics.h"

namespace dsv4::server {

struct ServerGauges {
  std::string model_name;
  int64_t generation_requests = 0;  // HTTP generation requests in flight (admitted)
  int64_t engine_requests = 0;      // their engine requests (choices)
};

// One sample set per engine (data-parallel replica), labelled engine="0", "1", ... as vLLM labels its
// engines; what the HTTP server itself counts (latencies from arrival, finish reasons, rejections)
// goes under engine 0.
std::string render_metrics(std::span<const EngineStats> engines, const RequestMetrics::Snapshot& requests,
                           const ServerGauges& server);

}  // namespace dsv4::server
