#include "server/metrics_page.h"

#include <utility>

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

void scheduler_metrics(PrometheusText& p, const EngineStats& e, const Labels& l) {
  p.gauge("vllm:num_requests_running", "Number of requests in model execution batches.", l,
          static_cast<double>(e.running));
  p.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", l,
          static_cast<double>(e.waiting));
  // dsv4 never sleeps; the family is there because vLLM's dashboards read it.
  p.family("vllm:engine_sleep_state", "gauge", "Engine sleep state; awake = 1 means the engine is awake.");
  for (const auto& [state, value] : {std::pair{"awake", 1}, {"weights_offloaded", 0}, {"discard_all", 0}}) {
    Labels with = l;
    with.emplace_back("sleep_state", state);
    p.sample(with, value);
  }
  p.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", l, e.kv_usage());
  p.counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", l,
            static_cast<double>(e.preemptions));
}

void cache_metrics(PrometheusText& p, const EngineStats& e, const Labels& l) {
  p.counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.", l,
            static_cast<double>(e.prefix_query_tokens));
  p.counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", l,
            static_cast<double>(e.prefix_hit_tokens));
  // No KV connector and no multi-modal inputs: vLLM's families, always zero.
  p.counter("vllm:external_prefix_cache_queries", "External prefix cache queries (no KV connector: 0).", l, 0);
  p.counter("vllm:external_prefix_cache_hits", "External prefix cache hits (no KV connector: 0).", l, 0);
  p.counter("vllm:mm_cache_queries", "Multi-modal cache queries (text only: 0).", l, 0);
  p.counter("vllm:mm_cache_hits", "Multi-modal cache hits (text only: 0).", l, 0);
  // An info gauge: vLLM labels it with the cache config and the engine, not the model.
  Labels info = e.cache_config ? *e.cache_config : Labels{};
  info.push_back(l.back());  // the engine
  p.gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", info, 1);
}

// `server`: this engine's labels also carry what the HTTP server counted (engine 0's).
void token_metrics(PrometheusText& p, const EngineStats& e, const RequestMetrics::Snapshot& r, const Labels& l,
                   bool server) {
  p.counter("vllm:prompt_tokens", "Number of prefill tokens processed.", l, static_cast<double>(e.prompt_tokens));
  p.counter("vllm:generation_tokens", "Number of generation tokens processed.", l,
            static_cast<double>(e.generation_tokens));
  p.family("vllm:request_success", "counter", "Count of successfully processed requests.");
  if (!server) return;
  for (const auto& [reason, n] : r.finished) {
    Labels with = l;
    with.emplace_back("finished_reason", reason);
    p.sample(with, static_cast<double>(n));
  }
}

// vLLM's request-level histograms: what the engine saw (phases, token counts) and what the server saw
// (latencies from the request's arrival, n and the longest choice of each HTTP request).
void request_histograms(PrometheusText& p, const EngineStats& e, const RequestMetrics::Snapshot& r, const Labels& l,
                        bool server) {
  const RequestHistograms& q = e.requests;
  const struct {
    const char* name;
    const char* help;
    const Histogram& h;
    bool servers = false;  // the HTTP server's (engine 0's samples), not the engine's
  } families[] = {
      {"vllm:request_prompt_tokens", "Number of prefill tokens processed.", q.prompt_tokens},
      {"vllm:request_generation_tokens", "Number of generation tokens processed.", q.generation_tokens},
      {"vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", e.iteration_tokens},
      {"vllm:request_max_num_generation_tokens", "Histogram of maximum number of requested generation tokens.",
       r.max_num_generation_tokens, true},
      {"vllm:request_params_n", "Histogram of the n request parameter.", r.params_n, true},
      {"vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", q.max_tokens},
      {"vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", r.ttft, true},
      {"vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", r.itl, true},
      {"vllm:request_time_per_output_token_seconds", "Histogram of time_per_output_token_seconds per request.",
       q.time_per_output_token},
      {"vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", r.e2e, true},
      {"vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", q.queue},
      {"vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", q.inference},
      {"vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", q.prefill},
      {"vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", q.decode},
  };
  for (const auto& f : families) {
    p.family(f.name, "histogram", f.help);
    if (server || !f.servers) p.histogram(l, f.h);
  }
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
  if (e.host_tier.capacity_bytes == 0) return;
  per_group("dsv4:kv_group_host_offloaded_blocks", "counter", "Blocks of the group's unit copied to the host tier.",
            [](const KvGroupUsage& g) { return g.host_offloaded_blocks; });
  per_group("dsv4:kv_group_host_restored_blocks", "counter",
            "Blocks of the group's unit brought back from the host tier.",
            [](const KvGroupUsage& g) { return g.host_restored_blocks; });
  per_group("dsv4:kv_group_host_offload_bytes", "counter", "The group's bytes of the blocks copied to the host tier.",
            [](const KvGroupUsage& g) { return g.host_offload_bytes; });
  per_group("dsv4:kv_group_host_restore_bytes", "counter",
            "The group's bytes of the blocks brought back from the host tier.",
            [](const KvGroupUsage& g) { return g.host_restore_bytes; });
}

// The prefix cache's host tier (--kv-offload-bytes): gauges of its bytes, counters of what it served.
void host_tier_metrics(PrometheusText& p, const KvHostTierUsage& h, const Labels& l) {
  struct Metric {
    const char* name;
    const char* help;
    bool counter;
    double value;
  };
  const auto v = [](auto x) { return static_cast<double>(x); };
  const Metric metrics[] = {
      {"dsv4:kv_host_tier_capacity_bytes", "Bytes of the prefix cache's host tier (--kv-offload-bytes).", false,
       v(h.capacity_bytes)},
      {"dsv4:kv_host_tier_used_bytes", "Bytes the host tier's kept blocks take.", false, v(h.used_bytes)},
      {"dsv4:kv_host_tier_hits", "Prefix lookups that brought blocks back from the host tier.", true, v(h.hits)},
      {"dsv4:kv_host_tier_restored_tokens", "Prompt positions found only thanks to the host tier.", true,
       v(h.restored_tokens)},
      {"dsv4:kv_host_tier_offload_bytes", "Bytes copied from the device pools to the host tier.", true,
       v(h.offload_bytes)},
      {"dsv4:kv_host_tier_restore_bytes", "Bytes copied from the host tier back to the device pools.", true,
       v(h.restore_bytes)},
      {"dsv4:kv_host_tier_restore_copy_seconds",
       "Time the restores' copies took (on a GPU the copy queue's own): restore_bytes over it is their bandwidth.",
       true, h.restore_copy_seconds},
      {"dsv4:kv_host_tier_evictions", "Blocks the host tier dropped for room.", true, v(h.evictions)},
  };
  for (const Metric& m : metrics)
    m.counter ? p.counter(m.name, m.help, l, m.value) : p.gauge(m.name, m.help, l, m.value);
  if (h.capacity_bytes > 0) {
    p.histogram("dsv4:kv_host_tier_restore_seconds",
                "Restores from the host tier: blocks allocated, copied back and the copies finished.", l,
                h.restore_seconds);
  }
}

void engine_metrics(PrometheusText& p, const EngineStats& e, const RequestMetrics::Snapshot& r, const ServerGauges& s,
                    const Labels& l, bool server) {
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
  p.family("dsv4:http_generation_requests", "gauge",
           "Generation requests the HTTP server has admitted and not answered.");
  if (server) p.sample(l, static_cast<double>(s.generation_requests));
  p.family("dsv4:requests_rejected", "counter", "Generation requests refused before reaching the engine (4xx, 503).");
  if (server) p.sample(l, static_cast<double>(r.rejected));
  p.counter("dsv4:prefix_cache_prompt_tokens_cached", "Prompt tokens served by the prefix cache.", l,
            static_cast<double>(e.cached_prompt_tokens));
  host_tier_metrics(p, e.host_tier, l);
  p.counter("dsv4:computed_tokens", "Positions run through the model (recomputation included).", l,
            static_cast<double>(e.computed_tokens));
  p.counter("dsv4:failed_steps", "Engine steps that failed.", l, static_cast<double>(e.failed_steps));
  p.counter("dsv4:idle_steps", "Steps of a data-parallel replica with nothing scheduled, beside its peers' steps.", l,
            static_cast<double>(e.idle_steps));
  p.counter("dsv4:requests_aborted", "Engine requests aborted (client gone, stop string, shutdown).", l,
            static_cast<double>(e.requests_aborted));
  p.counter("dsv4:requests_failed", "Engine requests that ended with an error.", l,
            static_cast<double>(e.requests_failed));
  p.family("dsv4:engine_step_seconds", "histogram", "Duration of engine steps.");
  p.histogram(l, step_histogram(e.steps));
  p.counter("dsv4:engine_step_schedule_seconds", "Of the engine steps' time: making their schedules.", l,
            e.steps.schedule_seconds);
  p.counter("dsv4:engine_step_execute_seconds",
            "Of the engine steps' time: the executor's steps (batch, forward, sampling, tokens back).", l,
            e.steps.execute_seconds);
  p.counter("dsv4:engine_step_execute_wait_seconds",
            "Of the executor's steps: the engine thread blocked on its device (the rest is host work).", l,
            e.steps.execute_wait_seconds);
  p.counter("dsv4:engine_step_outputs_seconds",
            "Of the engine steps' time: applying the sampled tokens (stop checks, streams).", l,
            e.steps.outputs_seconds);
  const StepTimes& t = e.steps;
  p.counter("dsv4:engine_graph_steps", "Engine steps run from CUDA graphs (decode steps).", l,
            static_cast<double>(t.graph_steps));
  p.counter("dsv4:engine_graph_step_execute_seconds", "Of the executor's time: its steps run from CUDA graphs.", l,
            t.graph_execute_seconds);
  p.counter("dsv4:engine_graph_step_wait_seconds", "Of the graph steps' time: blocked on the device.", l,
            t.graph_wait_seconds);
  p.counter("dsv4:engine_graph_step_index_seconds", "Of the graph steps' time: the host building the step's index.", l,
            t.graph_index_seconds);
  p.counter("dsv4:engine_graph_step_launch_seconds", "Of the graph steps' time: the host launching the graph.", l,
            t.graph_launch_seconds);
}

}  // namespace

std::string render_metrics(std::span<const EngineStats> engines, const RequestMetrics::Snapshot& requests,
                           const ServerGauges& server) {
  PrometheusText p;
  for (size_t d = 0; d < engines.size(); ++d) {  // each family once, a sample set per engine
    const EngineStats& e = engines[d];
    const Labels l = {{"model_name", server.model_name}, {"engine", std::to_string(d)}};
    const bool first = d == 0;
    scheduler_metrics(p, e, l);
    cache_metrics(p, e, l);
    token_metrics(p, e, requests, l, first);
    request_histograms(p, e, requests, l, first);
    pool_metrics(p, e, l);
    group_metrics(p, e, l);
    engine_metrics(p, e, requests, server, l, first);
  }
  return p.text();
}

}  // namespace dsv4::server
