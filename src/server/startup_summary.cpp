#include "server/startup_summary.h"

#include <fmt/format.h>

namespace dsv4::server {
namespace {

std::string bytes_text(int64_t b) {
  const double v = static_cast<double>(b);
  if (b >= (int64_t{1} << 30)) return fmt::format("{:.2f} GiB", v / (1 << 30));
  if (b >= (int64_t{1} << 20)) return fmt::format("{:.1f} MiB", v / (1 << 20));
  if (b >= 1024) return fmt::format("{:.1f} KiB", v / 1024);
  return fmt::format("{} B", b);
}

// The JSON body in single quotes: the model name is the only variable and cannot hold a quote we add.
std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (const char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

std::string base_url(const std::string& host, int port) {
  const bool wildcard = host.empty() || host == "0.0.0.0" || host == "::";
  const std::string h = wildcard ? "127.0.0.1" : host;
  return fmt::format("http://{}:{}", h.find(':') != std::string::npos ? "[" + h + "]" : h, port);
}

std::string curl_example(const std::string& url, const std::string& model, bool api_key) {
  const std::string body = fmt::format(
      R"({{"model": "{}", "messages": [{{"role": "user", "content": "Hello!"}}], "max_tokens": 32}})", model);
  return fmt::format("curl {}/v1/chat/completions -H 'Content-Type: application/json'{} -d {}", url,
                     api_key ? " -H \"Authorization: Bearer $DSV4_API_KEY\"" : "", shell_quote(body));
}

std::string startup_summary(const StartupFacts& f) {
  const std::string url = base_url(f.host, f.port);
  const double seqs = f.max_model_len > 0 ? static_cast<double>(f.kv_tokens) / static_cast<double>(f.max_model_len) : 0;
  std::string s = "dsv4 serve is ready\n";
  s += fmt::format("  model        {} ({})\n", f.model_name, f.model_path);
  if (!f.weights.empty()) s += fmt::format("  weights      {}\n", f.weights);
  s += fmt::format("  tokenizer    {}\n", f.tokenizer_path);
  s += fmt::format("  backend      {}, loaded in {:.1f} s\n", f.backend, f.load_seconds);
  for (const auto& line : f.parallel) s += fmt::format("  {}\n", line);
  if (!f.parallel.empty()) {
    s += fmt::format("  per rank     weights {}, KV pools {} (each rank holds its replica's whole KV)\n",
                     bytes_text(f.rank_weight_bytes), bytes_text(f.pool_bytes));
  }
  s += fmt::format("  limits       max_model_len {}, max_num_seqs {}, max_num_batched_tokens {}\n", f.max_model_len,
                   f.max_num_seqs, f.max_num_batched_tokens);
  s += fmt::format("  KV cache     {} of {} ({}), prefix caching {}\n", bytes_text(f.pool_bytes),
                   bytes_text(f.kv_cache_memory), f.kv_dtypes, f.prefix_caching ? "on" : "off");
  s += fmt::format("  KV capacity  {} tokens = {:.2f} sequences of max_model_len\n", f.kv_tokens, seqs);
  if (f.offload_bytes > 0) {
    s += fmt::format("  KV host tier {} (--kv-offload-bytes): {} tokens of evicted prefixes\n",
                     bytes_text(f.offload_bytes), f.host_tier_tokens);
  }
  for (size_t i = 0; i < f.pools.size(); ++i) {
    const PoolSummary& p = f.pools[i];
    s += fmt::format("  pool {}       {} pages x {} = {}  ({})\n", i, p.pages, bytes_text(p.page_bytes),
                     bytes_text(p.pages * p.page_bytes), p.units);
  }
  s += fmt::format("  endpoints    {0}/v1/chat/completions {0}/v1/completions {0}/v1/models\n", url);
  s += fmt::format("               {0}/v1/responses (OpenAI Responses) {0}/v1/messages (Anthropic Messages)\n", url);
  s += fmt::format("               {0}/health {0}/metrics {0}/tokenize {0}/detokenize {0}/version\n", url);
  if (f.api_key) {
    s += "  auth         bearer token (or x-api-key) required on /v1/* and the tokenizer endpoints (--api-key)\n";
  }
  s += "  try:\n    " + curl_example(url, f.model_name, f.api_key) + "\n";
  return s;
}

}  // namespace dsv4::server
