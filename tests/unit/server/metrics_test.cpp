// Prometheus text: families, counters' _total, cumulative histogram buckets with Python-style bounds, label
// escaping; the /metrics page renders vLLM's names and the dsv4 per-pool and per-group gauges.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <random>

#include "core/vllm_buckets.h"
#include "engine/request_phases.h"
#include "server/metrics_page.h"
#include "server/prometheus_text.h"

namespace dsv4::server {
namespace {

TEST(PrometheusText, GaugeCounterAndEscaping) {
  PrometheusText p;
  p.gauge("a:g", "A gauge.", {{"model_name", "m\"x\\y\nz"}}, 0.25);
  p.counter("a:c", "A counter.", {}, 3);
  EXPECT_EQ(p.text(),
            "# HELP a:g A gauge.\n# TYPE a:g gauge\na:g{model_name=\"m\\\"x\\\\y\\nz\"} 0.25\n"
            "# HELP a:c_total A counter.\n# TYPE a:c_total counter\na:c_total 3\n");
}

TEST(PrometheusText, HistogramBucketsAreCumulative) {
  const std::array<double, 3> bounds = {0.5, 1.0, 2.5};
  Histogram h(bounds);
  h.observe(0.1);
  h.observe(0.5);  // le is inclusive
  h.observe(2.0);
  h.observe(9.0);
  PrometheusText p;
  p.family("x", "histogram", "H.");
  p.histogram({{"k", "v"}}, h);
  EXPECT_EQ(p.text(),
            "# HELP x H.\n# TYPE x histogram\n"
            "x_bucket{k=\"v\",le=\"0.5\"} 2\nx_bucket{k=\"v\",le=\"1.0\"} 2\nx_bucket{k=\"v\",le=\"2.5\"} 3\n"
            "x_bucket{k=\"v\",le=\"+Inf\"} 4\nx_sum{k=\"v\"} 11.6\nx_count{k=\"v\"} 4\n");
}

TEST(PrometheusText, SampleValues) {
  EXPECT_EQ(format_sample_value(3), "3");
  EXPECT_EQ(format_sample_value(0.125), "0.125");
  EXPECT_EQ(format_sample_value(1.0 / 0.0), "+Inf");
  EXPECT_EQ(format_le(10), "10.0");
  EXPECT_EQ(format_le(0.001), "0.001");
}

TEST(VllmBuckets, OneTwoFiveUpToTheContext) {
  EXPECT_EQ(vllm_buckets::one_two_five(100), (std::vector<double>{1, 2, 5, 10, 20, 50, 100}));
  EXPECT_EQ(vllm_buckets::one_two_five(4999), (std::vector<double>{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000}));
  EXPECT_EQ(vllm_buckets::one_two_five(0), std::vector<double>{});
}

// vLLM's phase definitions from the engine's four timestamps, with random gaps.
TEST(RequestHistograms, PhasesFromTimestamps) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> ms(1, 4000);
  const int wait = ms(rng), prefill = ms(rng), decode = ms(rng);
  RequestPhases p;
  p.queued = RequestPhases::Clock::time_point{} + std::chrono::seconds(100);
  p.scheduled = p.queued + std::chrono::milliseconds(wait);
  p.first_token = *p.scheduled + std::chrono::milliseconds(prefill);
  p.last_token = *p.first_token + std::chrono::milliseconds(decode);
  RequestHistograms h(4096);
  h.observe(p, 700, 11, 64);
  EXPECT_NEAR(h.queue.sum, wait / 1000.0, 1e-9);
  EXPECT_NEAR(h.prefill.sum, prefill / 1000.0, 1e-9);
  EXPECT_NEAR(h.decode.sum, decode / 1000.0, 1e-9);
  EXPECT_NEAR(h.inference.sum, (prefill + decode) / 1000.0, 1e-9);
  EXPECT_NEAR(h.time_per_output_token.sum, decode / 1000.0 / 10, 1e-9);
  EXPECT_EQ(h.prompt_tokens.counts[9], 1u);      // 700 is in (500, 1000]
  EXPECT_EQ(h.generation_tokens.counts[4], 1u);  // 11 is in (10, 20]
  EXPECT_EQ(h.max_tokens.sum, 64);
  RequestPhases never;  // aborted while waiting: no phase to report
  never.queued = p.queued;
  h.observe(never, 5, 0, 5);
  EXPECT_EQ(h.queue.count, 1u);
  EXPECT_EQ(h.prompt_tokens.count, 1u);
}

TEST(RequestMetrics, ItlChargesEachToken) {
  RequestMetrics m;
  m.observe_ttft(0.03);
  m.observe_itl(0.1, 4);  // 4 tokens in 0.1 s: 25 ms each
  m.observe_e2e(1.2);
  m.count_finished("stop");
  m.count_finished("stop");
  const auto s = m.snapshot();
  EXPECT_EQ(s.ttft.count, 1u);
  EXPECT_EQ(s.itl.count, 4u);
  EXPECT_NEAR(s.itl.sum, 0.1, 1e-12);
  EXPECT_EQ(s.itl.counts[1], 4u);  // the 0.025 bucket
  EXPECT_EQ(s.finished.at("stop"), 2u);
}

TEST(MetricsPage, VllmNamesAndKvGauges) {
  EngineStats e;
  e.running = 2;
  e.waiting = 1;
  e.prompt_tokens = 100;
  e.generation_tokens = 40;
  e.prefix_query_tokens = 512;
  e.prefix_hit_tokens = 256;
  e.preemptions = 3;
  e.pools = {{1024, 100, 25, 10, 65}, {4096, 10, 0, 0, 10}};
  e.groups = {{"swa", 0, 20, 4, 2, 512, 256, 7}, {"c4.kv", 1, 0, 4, 0, 512, 0}};
  e.graphs.replayed = 90;
  e.graphs.recorded = 4;
  e.graphs.eager = 5;
  e.graphs.failed = 1;
  e.steps.schedule_seconds = 0.5;
  e.steps.execute_seconds = 4;
  e.steps.outputs_seconds = 0.25;
  e.steps.execute_wait_seconds = 3.5;
  e.steps.graph_steps = 7;
  e.steps.graph_index_seconds = 0.25;
  constexpr std::array<double, 2> restore_bounds = {0.0005, 0.001};
  e.host_tier = {1 << 20, 4096, 2, 512, 8192, 6144, 1, Histogram(restore_bounds), 0.25};
  e.host_tier.restore_seconds.observe(0.0003);
  e.groups[0].host_restored_blocks = 3;
  e.groups[0].host_restore_bytes = 3000;
  e.cache_config = std::make_shared<const std::vector<std::pair<std::string, std::string>>>(
      std::vector<std::pair<std::string, std::string>>{{"block_size", "256"}});
  RequestMetrics r;
  r.count_finished("length");
  r.observe_request(2, 7, 1024);
  const std::string m = render_metrics(std::span(&e, 1), r.snapshot(), {"mod", 3, 4});
  const std::string l = "{model_name=\"mod\",engine=\"0\"}";
  for (const std::string& line :
       {"vllm:num_requests_running" + l + " 2",
        "vllm:num_requests_waiting" + l + " 1",
        "vllm:prefix_cache_queries_total" + l + " 512",
        "vllm:prefix_cache_hits_total" + l + " 256",
        "vllm:num_preemptions_total" + l + " 3",
        "vllm:prompt_tokens_total" + l + " 100",
        "vllm:generation_tokens_total" + l + " 40",
        std::string("vllm:request_success_total{model_name=\"mod\",engine=\"0\",finished_reason=\"length\"} 1"),
        std::string("dsv4:kv_pool_usage_perc{model_name=\"mod\",engine=\"0\",pool=\"0\"} 0.25"),
        std::string("dsv4:kv_pool_used_pages{model_name=\"mod\",engine=\"0\",pool=\"1\"} 0"),
        std::string("dsv4:kv_group_usage_perc{model_name=\"mod\",engine=\"0\",group=\"swa\",pool=\"0\"} 0.2"),
        std::string("dsv4:kv_group_prefix_hit_rate{model_name=\"mod\",engine=\"0\",group=\"swa\",pool=\"0\"} 0.5"),
        std::string("dsv4:kv_group_retained_blocks{model_name=\"mod\",engine=\"0\",group=\"swa\",pool=\"0\"} 7"),
        "dsv4:http_generation_requests" + l + " 3",
        "dsv4:cuda_graph_replays_total" + l + " 90",
        "dsv4:cuda_graph_recordings_total" + l + " 4",
        "dsv4:cuda_graph_warmup_steps_total" + l + " 5",
        "dsv4:cuda_graph_failures_total" + l + " 1",
        "dsv4:engine_step_schedule_seconds_total" + l + " 0.5",
        "dsv4:engine_step_execute_seconds_total" + l + " 4",
        "dsv4:engine_step_outputs_seconds_total" + l + " 0.25",
        "dsv4:engine_step_execute_wait_seconds_total" + l + " 3.5",
        "dsv4:engine_graph_steps_total" + l + " 7",
        "dsv4:engine_graph_step_index_seconds_total" + l + " 0.25",
        "dsv4:kv_host_tier_capacity_bytes" + l + " 1048576",
        "dsv4:kv_host_tier_used_bytes" + l + " 4096",
        "dsv4:kv_host_tier_hits_total" + l + " 2",
        "dsv4:kv_host_tier_restored_tokens_total" + l + " 512",
        "dsv4:kv_host_tier_offload_bytes_total" + l + " 8192",
        "dsv4:kv_host_tier_restore_bytes_total" + l + " 6144",
        "dsv4:kv_host_tier_evictions_total" + l + " 1",
        "dsv4:kv_host_tier_restore_copy_seconds_total" + l + " 0.25",
        std::string("dsv4:kv_host_tier_restore_seconds_bucket{model_name=\"mod\",engine=\"0\",le=\"0.0005\"} 1"),
        "dsv4:kv_host_tier_restore_seconds_count" + l + " 1",
        std::string(
            "dsv4:kv_group_host_restored_blocks_total{model_name=\"mod\",engine=\"0\",group=\"swa\",pool=\"0\"} 3"),
        std::string(
            "dsv4:kv_group_host_restore_bytes_total{model_name=\"mod\",engine=\"0\",group=\"swa\",pool=\"0\"} 3000")}) {
    EXPECT_NE(m.find(line + "\n"), std::string::npos) << line << "\n" << m;
  }
  EXPECT_NE(m.find("# TYPE vllm:time_to_first_token_seconds histogram"), std::string::npos);
  // Counters are declared under their sample name, so that parsers keep one family.
  for (const char* family : {"vllm:prompt_tokens", "vllm:prefix_cache_hits", "dsv4:kv_group_prefix_hits"}) {
    const std::string name = std::string(family) + "_total";
    EXPECT_NE(m.find("# TYPE " + name + " counter\n"), std::string::npos) << name;
    EXPECT_EQ(m.find("# TYPE " + std::string(family) + " counter"), std::string::npos) << family;
  }
  EXPECT_NE(m.find("vllm:engine_sleep_state{model_name=\"mod\",engine=\"0\",sleep_state=\"awake\"} 1\n"),
            std::string::npos);
  EXPECT_NE(m.find("vllm:cache_config_info{block_size=\"256\",engine=\"0\"} 1\n"), std::string::npos) << m;
  for (const char* h :
       {"vllm:request_queue_time_seconds", "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds",
        "vllm:request_inference_time_seconds", "vllm:request_prompt_tokens", "vllm:request_generation_tokens",
        "vllm:iteration_tokens_total", "vllm:request_params_n", "vllm:request_params_max_tokens"}) {
    EXPECT_NE(m.find("# TYPE " + std::string(h) + " histogram\n"), std::string::npos) << h;
  }
  EXPECT_NE(m.find("vllm:request_params_n_bucket{model_name=\"mod\",engine=\"0\",le=\"2.0\"} 1\n"), std::string::npos);
  EXPECT_NE(m.find("vllm:kv_cache_usage_perc" + l), std::string::npos);
}

// Data-parallel replicas: each family once, a sample set per engine under its label; what the HTTP
// server counted only under engine 0; families whole (no other family's lines inside one).
TEST(MetricsPage, EveryReplicaUnderItsEngineLabel) {
  std::vector<EngineStats> engines(2);
  engines[0].running = 5;
  engines[1].running = 7;
  engines[1].generation_tokens = 11;
  for (EngineStats& e : engines) e.pools = {{1024, 100, 25, 10, 65}};
  RequestMetrics r;
  r.count_finished("stop");
  const std::string m = render_metrics(engines, r.snapshot(), {"mod", 3, 4});
  const auto count = [&](const std::string& s) {
    size_t n = 0;
    for (size_t at = m.find(s); at != std::string::npos; at = m.find(s, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("# TYPE vllm:num_requests_running gauge\n"), 1u);
  EXPECT_NE(m.find("vllm:num_requests_running{model_name=\"mod\",engine=\"0\"} 5\n"), std::string::npos);
  EXPECT_NE(m.find("vllm:num_requests_running{model_name=\"mod\",engine=\"1\"} 7\n"), std::string::npos);
  EXPECT_NE(m.find("vllm:generation_tokens_total{model_name=\"mod\",engine=\"1\"} 11\n"), std::string::npos);
  EXPECT_NE(m.find("dsv4:kv_pool_used_pages{model_name=\"mod\",engine=\"1\",pool=\"0\"} 25\n"), std::string::npos);
  EXPECT_EQ(count("dsv4:http_generation_requests{"), 1u);
  EXPECT_EQ(count("vllm:request_success_total{"), 1u);
  EXPECT_EQ(count("vllm:time_to_first_token_seconds_count{"), 1u);
  EXPECT_EQ(count("vllm:request_queue_time_seconds_count{"), 2u);
  // The family's samples follow its TYPE line with no other family's HELP in between.
  const size_t type = m.find("# TYPE vllm:num_requests_running gauge");
  const size_t second = m.find("vllm:num_requests_running{model_name=\"mod\",engine=\"1\"}");
  EXPECT_EQ(m.find("# HELP", type), m.find("# HELP", second));
}

}  // namespace
}  // namespace dsv4::server
