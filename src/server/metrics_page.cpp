#include "server/metrics_page.h"

#include "server/prometheus_text.h"

namespace dsv4::server {
namespace {

Histogram step_histogram(const StepTimes& t) {
  Histogram h(t.kBuckets);
  for (size_t i = 0; i < t.buckets.size(); ++i) h.counts[i] = static_cast<uint64_t>(t.buckets[i]);
  h.sum = t.total_seconds;
  h.count = static_cast<uint64_t>(t.count);
  return h;
}

void vllm_metrics(PrometheusText& p, const EngineStats& e, const RequestMetrics::Snapshot& r, const Labels& l) {
  p.gauge("vllm:num_requests_running", "Number of requests in model execution batches.", l,
          static_cast<double>(e.running));
  p.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", l,
          static_cast<double>(e.waiting));
  p.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", l, e.kv_usage());
  p.counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.", l,
            static_cast<double>(e.prefix_query_tokens));
  p.counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", l,
            static_cast<double>(e.prefix_hit_tokens));
  p.counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", l,
            static_cast<double>(e.preemptions));
  p.counter("vllm:prompt_tokens", "Number of prefill tokens processed.", l, static_cast<double>(e.prompt_tokens));
  p.counter("vllm:generation_tokens", "Number of generation tokens processed.", l,
            static_cast<double>(e.generation_tokens));
  p.family("vllm:request_success", "counter", "Count of successfully processed requests.");
  for (const auto& [reason, n] : r.finished) {
    Labels with = l;
    with.emplace_back("finished_reason", reason);
    p.sample(with, static_cast<double>(n));
  }
  p.family("vllm:time_to_first_token_seconds", "histogram", "Histogram of time to first token in seconds.");
  p.histogram(l, r.ttft);
  p.family("vllm:inter_token_latency_seconds", "histogram", "Histogram of inter-token latency in seconds.");
  p.histogram(l, r.itl);
  p.family("vllm:e2e_request_latency_seconds", "histogram", "Histogram of e2e request latency in seconds.");
  p.histogram(l, r.e2e);
}

void pool_metrics(PrometheusText& p, const EngineStats& e, const Labels& l) {
  const auto per_pool = [&](const char* name, const char* type, const char* help, auto value) {
    p.family(name, type, help);
    for (size_t i = 0; i < e.pools.size(); ++i) {
      Labels with = l;
      with.emplace_back("pool", std::to_string(i));
      p.sample(with, static_cast<double>(value(e.pools[i])));
    }
  };
  per_pool("dsv4:kv_pool_usage_perc", "gauge", "Pages held by requests / capacity, per KV pool (size bucket).",
           [](const KvPoolUsage& u) { return u.usage(); });
  per_pool("dsv4:kv_pool_capacity_pages", "gauge", "Layer pages of the pool.",
           [](const KvPoolUsage& u) { return u.capacity_pages; });
  per_pool("dsv4:kv_pool_used_pages", "gauge", "Layer pages held by requests.",
           [](const KvPoolUsage& u) { return u.used_pages; });
  per_pool("dsv4:kv_pool_cached_pages", "gauge",
           "Layer pages kept by the prefix cache (evictable): full blocks and retained sliding checkpoints.",
           [](const KvPoolUsage& u) { return u.cached_pages; });
  per_pool("dsv4:kv_pool_free_pages", "gauge", "Layer pages free.", [](const KvPoolUsage& u) { return u.free_pages; });
  per_pool("dsv4:kv_pool_page_bytes", "gauge", "Bytes of one layer page.",
           [](const KvPoolUsage& u) { return u.page_bytes; });
}

void group_metrics(PrometheusText& p, const EngineStats& e, const Labels& l) {
  const auto per_group = [&](const char* name, const char* type, const char* help, auto value) {
    p.family(name, type, help);
    for (const KvGroupUsage& g : e.groups) {
      Labels with = l;
      with.emplace_back("group", g.name);
      with.emplace_back("pool", std::to_string(g.pool));
      p.sample(with, static_cast<double>(value(g)));
    }
  };
  per_group("dsv4:kv_group_used_pages", "gauge", "Layer pages the running requests hold in the group's unit.",
            [](const KvGroupUsage& g) { return g.used_pages; });
  per_group("dsv4:kv_group_usage_perc", "gauge", "The group's used pages / its pool's capacity.",
            [&](const KvGroupUsage& g) {
              const size_t pool = static_cast<size_t>(g.pool);
              const int64_t cap = pool < e.pools.size() ? e.pools[pool].capacity_pages : 0;
              return cap > 0 ? static_cast<double>(g.used_pages) / static_cast<double>(cap) : 0.0;
            });
  per_group("dsv4:kv_group_prefix_hit_rate", "gauge", "Prompt tokens this group alone could serve / looked up.",
            [](const KvGroupUsage& g) { return g.hit_rate(); });
  per_group("dsv4:kv_group_prefix_queries", "counter", "Prompt tokens looked up in the prefix cache.",
            [](const KvGroupUsage& g) { return g.query_tokens; });
  per_group("dsv4:kv_group_prefix_hits", "counter", "Prompt tokens this group alone could serve.",
            [](const KvGroupUsage& g) { return g.hit_tokens; });
  per_group("dsv4:kv_group_retained_blocks", "gauge",
            "Blocks kept only for the prefix cache; for sliding groups, the rows of retained checkpoints.",
            [](const KvGroupUsage& g) { return g.cached_blocks; });
}

void engine_metrics(PrometheusText& p, const EngineStats& e, const RequestMetrics::Snapshot& r, const ServerGauges& s,
                    const Labels& l) {
  p.gauge("dsv4:engine_healthy", "1 while the engine serves, 0 after a failed step.", l, e.healthy ? 1 : 0);
  const StepGraphStats& g = e.graphs;
  p.counter("dsv4:cuda_graph_replays", "Decode steps replayed from a CUDA graph recorded for their batch shape.", l,
            static_cast<double>(g.replayed));
  p.counter("dsv4:cuda_graph_recordings", "CUDA graphs recorded (one per batch shape, again when one went stale).", l,
            static_cast<double>(g.recorded));
  p.counter("dsv4:cuda_graph_warmup_steps", "Padded decode steps run eagerly (a shape's warm-up, failed shapes).", l,
            static_cast<double>(g.eager));
  p.counter("dsv4:cuda_graph_failures", "Batch shapes whose recording or replay failed (eager from then on).", l,
            static_cast<double>(g.failed));
  p.gauge("dsv4:num_requests_preempted_waiting", "Preempted requests waiting to resume.", l,
          static_cast<double>(e.preempted_waiting));
  p.gauge("dsv4:http_generation_requests", "Generation requests the HTTP server has admitted and not answered.", l,
          static_cast<double>(s.generation_requests));
  p.counter("dsv4:requests_rejected", "Generation requests refused before reaching the engine (4xx, 503).", l,
            static_cast<double>(r.rejected));
  p.counter("dsv4:prefix_cache_prompt_tokens_cached", "Prompt tokens served by the prefix cache.", l,
            static_cast<double>(e.cached_prompt_tokens));
  p.counter("dsv4:computed_tokens", "Positions run through the model (recomputation included).", l,
            static_cast<double>(e.computed_tokens));
  p.counter("dsv4:failed_steps", "Engine steps that failed.", l, static_cast<double>(e.failed_steps));
  p.counter("dsv4:requests_aborted", "Engine requests aborted (client gone, stop string, shutdown).", l,
            static_cast<double>(e.requests_aborted));
  p.counter("dsv4:requests_failed", "Engine requests that ended with an error.", l,
            static_cast<double>(e.requests_failed));
  p.family("dsv4:engine_step_seconds", "histogram", "Duration of engine steps.");
  p.histogram(l, step_histogram(e.steps));
}

}  // namespace

std::string render_metrics(const EngineStats& engine, const RequestMetrics::Snapshot& requests,
                           const ServerGauges& server) {
  PrometheusText p;
  const Labels l = {{"model_name", server.model_name}, {"engine", "0"}};
  vllm_metrics(p, engine, requests, l);
  pool_metrics(p, engine, l);
  group_metrics(p, engine, l);
  engine_metrics(p, engine, requests, server, l);
  return p.text();
}

}  // namespace dsv4::server
