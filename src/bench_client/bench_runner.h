// The load generator of `dsv4 bench serve`: sends a dataset to an OpenAI-compatible /v1/completions (a
// prompt) or /v1/chat/completions (one user message) as streaming requests, with vLLM's arrival process (--request-rate
// R: Poisson, or gamma with --burstiness; inf: all at once) and --max-concurrency, recording per request TTFT,
// inter-chunk gaps, end-to-end latency, and the server's usage (stream_options.include_usage): prompt, output and
// cached tokens.
#pragma once

#include <string>
#include <vector>

#include "bench_client/bench_dataset.h"
#include "bench_client/bench_report.h"

namespace dsv4::bench {

struct BenchRunOptions {
  BenchSettings settings;
  std::string api_key;
  bool ignore_eos = false;
  double temperature = 0;  // vLLM's client sends 0
  uint64_t seed = 0;
  bool progress = true;
  double timeout_seconds = 6 * 3600;
};

struct BenchRun {
  std::vector<RequestRecord> records;  // in dataset order
  double duration = 0;                 // first send to last answer, seconds
  int64_t peak_concurrency = 0;
};

struct ServerModel {
  std::string id;
  int32_t vocab_size = 0;  // 0 when the server does not say (dsv4 does)
};

// The first model of GET /v1/models. Throws dsv4::Error when the server cannot be reached or answers oddly.
ServerModel discover_model(const std::string& base_url, const std::string& api_key);

// Whether the endpoint takes chat messages (it ends in /chat/completions).
bool is_chat_endpoint(const std::string& endpoint);

// Fills the text of id prompts through the server's /detokenize (vLLM's and dsv4's), for the chat
// endpoint: the server then tokenizes the text inside its chat template.
void detokenize_prompts(const std::string& base_url, const std::string& api_key, const std::string& model,
                        std::vector<BenchRequest>& requests);

// One request, streamed (also the "initial test run" vLLM makes before the benchmark).
RequestRecord send_request(const std::string& base_url, const BenchRunOptions& o, const BenchRequest& r);

BenchRun run_benchmark(const std::vector<BenchRequest>& requests, const BenchRunOptions& o);

}  // namespace dsv4::bench
