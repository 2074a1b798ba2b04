// `dsv4 bench serve` results as vLLM computes and prints them (vllm/benchmarks/serve.py): TTFT, TPOT
// (excluding the first token), ITL (gaps between streamed chunks) and E2E latency with mean, median, std
// and percentiles (numpy's linear interpolation), request and token throughput, in vLLM's result block
// (tools parse its lines) or its result JSON keys.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace dsv4::bench {

struct RequestRecord {
  bool success = false;
  std::string error;
  int64_t prompt_len = 0;
  int64_t output_tokens = 0;
  double ttft = 0;            // seconds
  double latency = 0;         // seconds, end to end
  std::vector<double> itl;    // seconds between chunks
  int64_t cached_tokens = 0;  // usage.prompt_tokens_details.cached_tokens (prefix-cache hits)
  double start = 0;           // seconds from the start of the run to the request's send
};

struct BenchSettings {
  std::string base_url, endpoint = "/v1/completions", model;
  double request_rate = 0;  // 0 = inf
  double burstiness = 1;
  int64_t max_concurrency = 0;  // 0 = unlimited
  int64_t num_prompts = 0;
  std::vector<double> percentiles = {50, 90, 95, 99};
  std::string dataset = "random";
  // The hits an ideal prefix cache allows (ideal_prefix_hits.h), in tokens; < 0 when unknown (text prompts).
  int64_t ideal_cached_tokens = -1;
};

struct BenchSummary {
  double duration = 0;
  int64_t completed = 0, failed = 0;
  int64_t total_input = 0, total_output = 0;
  int64_t total_cached = 0;    // prompt tokens the server's prefix cache served
  double hit_rate = 0;         // total_cached / total_input
  double ideal_hit_rate = -1;  // the dataset's best, over the same completed requests; < 0 when unknown
  double request_throughput = 0, output_throughput = 0, total_token_throughput = 0;
  int64_t peak_concurrency = 0;
  struct Stat {
    std::string key;   // ttft, tpot, itl, e2el
    std::string name;  // TTFT, TPOT, ITL, E2EL
    double mean = 0, median = 0, std = 0;
    std::vector<std::pair<double, double>> percentiles;  // (p, ms)
  };
  std::vector<Stat> stats;
};

// numpy.percentile with linear interpolation (p in [0, 100]); 0 for no values.
double percentile(std::vector<double> values, double p);

BenchSummary summarize(const std::vector<RequestRecord>& records, double duration, int64_t peak_concurrency,
                       const std::vector<double>& percentiles);
// The dataset's ideal hit rate over the completed requests (`ideal` per request, in dataset order).
void add_ideal_hit_rate(BenchSummary& s, const std::vector<RequestRecord>& records, const std::vector<int64_t>& ideal);

// vLLM's "Serving Benchmark Result" block.
std::string format_report(const BenchSummary& s, const BenchSettings& settings);
// vLLM's result JSON keys (mean_ttft_ms, p99_itl_ms, ...), the settings, and the per-request arrays.
nlohmann::ordered_json report_json(const BenchSummary& s, const BenchSettings& settings,
                                   const std::vector<RequestRecord>& records);

}  // namespace dsv4::bench
