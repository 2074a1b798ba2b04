#include "bench_client/bench_runner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <thread>

#include "bench_client/sse_client.h"
#include "core/error.h"
#include "core/progress_bar.h"

namespace dsv4::bench {
namespace {

using Clock = std::chrono::steady_clock;
using OJson = nlohmann::ordered_json;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

httplib::Client make_client(const std::string& base_url, double timeout) {
  httplib::Client c(base_url);
  c.set_connection_timeout(10);
  c.set_read_timeout(static_cast<time_t>(timeout));
  c.set_write_timeout(60);
  return c;
}

httplib::Headers auth_headers(const std::string& api_key) {
  if (api_key.empty()) return {};
  return {{"Authorization", "Bearer " + api_key}};
}

// Arrival offsets (seconds from the start) of each request: vLLM's gamma process with mean 1 / rate.
std::vector<double> arrival_offsets(size_t n, double rate, double burstiness, uint64_t seed) {
  std::vector<double> t(n, 0);
  if (rate <= 0) return t;
  std::mt19937_64 rng(seed);
  std::gamma_distribution<double> gap(burstiness, 1 / (rate * burstiness));
  double now = 0;
  for (size_t i = 0; i < n; ++i) {
    t[i] = now;
    now += gap(rng);
  }
  return t;
}

std::string error_message(const std::string& body, int status) {
  const OJson j = OJson::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_object() && j["error"].contains("message")) {
    return fmt::format("HTTP {}: {}", status, j["error"]["message"].dump());
  }
  return fmt::format("HTTP {}: {}", status, body.substr(0, 200));
}

// Counts as the server reports them (text prompts are tokenized there; cached tokens are its prefix hits).
void read_usage(const OJson& u, RequestRecord& rec) {
  rec.output_tokens = u.value("completion_tokens", rec.output_tokens);
  if (u.contains("prompt_tokens") && u["prompt_tokens"].is_number_integer()) {
    rec.prompt_len = u["prompt_tokens"].get<int64_t>();
  }
  const OJson* details = u.contains("prompt_tokens_details") ? &u["prompt_tokens_details"] : nullptr;
  if (details != nullptr && details->is_object() && details->contains("cached_tokens") &&
      (*details)["cached_tokens"].is_number_integer()) {
    rec.cached_tokens = (*details)["cached_tokens"].get<int64_t>();
  }
}

// Applies one streamed chunk to the record; false to stop reading (an error event).
bool on_chunk(const OJson& chunk, RequestRecord& rec, Clock::time_point t0, Clock::time_point& last, int64_t& chunks) {
  if (chunk.contains("error")) {
    rec.error = chunk["error"].value("message", chunk["error"].dump());
    return false;
  }
  const auto now = Clock::now();
  const OJson* choices = chunk.contains("choices") ? &chunk["choices"] : nullptr;
  if (choices != nullptr && choices->is_array() && !choices->empty()) {
    const OJson& c = (*choices)[0];
    const bool has_text = (c.contains("text") && c["text"].is_string() && !c["text"].get<std::string>().empty()) ||
                          (c.contains("delta") && c["delta"].contains("content"));
    if (has_text) {
      if (chunks++ == 0) {
        rec.ttft = std::chrono::duration<double>(now - t0).count();
      } else {
        rec.itl.push_back(std::chrono::duration<double>(now - last).count());
      }
      last = now;
    }
  }
  if (chunk.contains("usage") && chunk["usage"].is_object()) read_usage(chunk["usage"], rec);
  return true;
}

// The request body vLLM's client sends: a prompt on /v1/completions, one user message on chat.
OJson request_body(const BenchRunOptions& o, const BenchRequest& r) {
  OJson body = {{"model", o.settings.model},
                {"temperature", o.temperature},
                {"stream", true},
                {"stream_options", {{"include_usage", true}}}};
  if (is_chat_endpoint(o.settings.endpoint)) {
    DSV4_CHECK(!r.text.empty(), "bench: the chat endpoint needs text prompts (detokenize_prompts)");
    body["messages"] = OJson::array({{{"role", "user"}, {"content", r.text}}});
    body["max_completion_tokens"] = r.output_len;
  } else {
    body["prompt"] = r.text.empty() ? OJson(r.prompt) : OJson(r.text);
    body["max_tokens"] = r.output_len;
  }
  if (o.ignore_eos) body["ignore_eos"] = true;
  return body;
}

}  // namespace

ServerModel discover_model(const std::string& base_url, const std::string& api_key) {
  auto client = make_client(base_url, 30);
  const auto res = client.Get("/v1/models", auth_headers(api_key));
  DSV4_CHECK(res, "bench: cannot reach {}: {}", base_url, httplib::to_string(res.error()));
  DSV4_CHECK(res->status == 200, "bench: GET {}/v1/models answered {}", base_url,
             error_message(res->body, res->status));
  const OJson j = OJson::parse(res->body, nullptr, false);
  DSV4_CHECK(
      j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() && j["data"][0].contains("id"),
      "bench: GET {}/v1/models returned no model", base_url);
  ServerModel m;
  m.id = j["data"][0]["id"].get<std::string>();
  if (j["data"][0].contains("vocab_size") && j["data"][0]["vocab_size"].is_number_integer()) {
    m.vocab_size = j["data"][0]["vocab_size"].get<int32_t>();
  }
  return m;
}

bool is_chat_endpoint(const std::string& endpoint) {
  return endpoint.size() >= 17 && endpoint.compare(endpoint.size() - 17, 17, "/chat/completions") == 0;
}

void detokenize_prompts(const std::string& base_url, const std::string& api_key, const std::string& model,
                        std::vector<BenchRequest>& requests) {
  auto client = make_client(base_url, 60);
  for (BenchRequest& r : requests) {
    if (!r.text.empty()) continue;
    const OJson body = {{"model", model}, {"tokens", r.prompt}};
    const auto res = client.Post("/detokenize", auth_headers(api_key), body.dump(), "application/json");
    DSV4_CHECK(res, "bench: POST {}/detokenize failed: {}", base_url, httplib::to_string(res.error()));
    DSV4_CHECK(res->status == 200, "bench: the chat endpoint needs text: POST {}/detokenize answered {}", base_url,
               error_message(res->body, res->status));
    const OJson j = OJson::parse(res->body, nullptr, false);
    DSV4_CHECK(j.is_object() && j.contains("prompt") && j["prompt"].is_string(),
               "bench: POST {}/detokenize returned no prompt", base_url);
    r.text = j["prompt"].get<std::string>();
  }
}

RequestRecord send_request(const std::string& base_url, const BenchRunOptions& o, const BenchRequest& r) {
  RequestRecord rec;
  rec.prompt_len = static_cast<int64_t>(r.prompt.size());
  const OJson body = request_body(o, r);
  auto client = make_client(base_url, o.timeout_seconds);
  const auto t0 = Clock::now();
  auto last = t0;
  int64_t chunks = 0;
  bool done = false;
  const StreamResult res =
      post_stream(client, o.settings.endpoint, body.dump(), auth_headers(o.api_key), [&](const SseParser::Event& e) {
        if (e.comment) return true;
        if (e.data == "[DONE]") return done = true;
        const OJson chunk = OJson::parse(e.data, nullptr, false);
        return !chunk.is_discarded() && on_chunk(chunk, rec, t0, last, chunks);
      });
  rec.latency = since(t0);
  if (res.status != 200) {
    rec.error = res.status == 0 ? "connection failed: " + res.error : error_message(res.body, res.status);
  } else if (rec.error.empty() && !done) {
    rec.error = "the stream ended without [DONE]" + (res.error.empty() ? "" : ": " + res.error);
  }
  if (rec.output_tokens == 0) rec.output_tokens = chunks;  // a server without usage in streams
  rec.success = rec.error.empty();
  return rec;
}

BenchRun run_benchmark(const std::vector<BenchRequest>& requests, const BenchRunOptions& o) {
  BenchRun run;
  run.records.resize(requests.size());
  const std::vector<double> at =
      arrival_offsets(requests.size(), o.settings.request_rate, o.settings.burstiness, o.seed);
  const size_t workers =
      std::min(requests.size(),
               o.settings.max_concurrency > 0 ? static_cast<size_t>(o.settings.max_concurrency) : requests.size());
  std::atomic<size_t> next{0};
  std::atomic<int64_t> in_flight{0}, peak{0};
  std::mutex progress_mu;
  std::unique_ptr<ProgressBar> bar;
  if (o.progress) bar = std::make_unique<ProgressBar>("Benchmark", static_cast<int64_t>(requests.size()));
  int64_t finished = 0;
  const auto start = Clock::now();
  const auto work = [&] {
    for (size_t i; (i = next++) < requests.size();) {
      std::this_thread::sleep_until(start +
                                    std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(at[i])));
      const int64_t now_in_flight = ++in_flight;
      for (int64_t p = peak.load(); now_in_flight > p && !peak.compare_exchange_weak(p, now_in_flight);) {
      }
      const double sent = since(start);
      run.records[i] = send_request(o.settings.base_url, o, requests[i]);
      run.records[i].start = sent;
      --in_flight;
      std::lock_guard lock(progress_mu);
      if (bar) bar->update(++finished);
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(workers);
  for (size_t w = 0; w < workers; ++w) threads.emplace_back(work);
  for (std::thread& t : threads) t.join();
  run.duration = since(start);
  run.peak_concurrency = peak.load();
  if (bar) bar->finish();
  return run;
}

}  // namespace dsv4::bench
