// The one-screen summary `dsv4 serve` prints once the model is ready: model, backend, context and batch
// limits, KV capacity (tokens for one request, and in max-length sequences), the pools, the endpoints and
// a curl line to paste.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dsv4::server {

struct PoolSummary {
  int64_t page_bytes = 0;
  int64_t pages = 0;
  std::string units;  // the KV units whose pages live in it
};

struct StartupFacts {
  std::string model_name, model_path, tokenizer_path, backend;
  std::string weights;  // the load format and --hf-overrides (model/model_loader.h LoadOptions::describe)
  std::string kv_dtypes;
  // With several ranks: the layout's lines (which rank holds which heads, experts and vocabulary rows),
  // and each rank's weight and KV bytes (every rank of a replica holds the replica's whole KV).
  std::vector<std::string> parallel;
  int64_t rank_weight_bytes = 0;
  int64_t max_model_len = 0, max_num_seqs = 0, max_num_batched_tokens = 0;
  int64_t kv_cache_memory = 0, pool_bytes = 0;
  int64_t kv_tokens = 0;                            // positions one request can hold
  int64_t offload_bytes = 0, host_tier_tokens = 0;  // the host tier (--kv-offload-bytes), 0 when off
  bool prefix_caching = true;
  std::vector<PoolSummary> pools;
  std::string host;
  int port = 0;
  bool api_key = false;
  double load_seconds = 0;
};

std::string startup_summary(const StartupFacts& f);

// http://HOST:PORT, with a wildcard host replaced by 127.0.0.1 (the address to paste).
std::string base_url(const std::string& host, int port);
// A chat completion request for the model, as a shell command.
std::string curl_example(const std::string& url, const std::string& model, bool api_key);

}  // namespace dsv4::server
