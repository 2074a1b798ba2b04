// The HTTP server end to end over a real Engine with a scripted executor (no model): both generation
// endpoints streaming and not, stop strings and stop ids, n, logprobs, the error table, auth, the bounded
// queue, disconnects, engine failure, graceful drain, pings, /metrics, /tokenize.
#include <gtest/gtest.h>

#include <future>

#include "bench_client/sse_client.h"
#include "server_test_support.h"

namespace dsv4::server {
namespace {

using servertest::TestServer;
using servertest::TestServerOptions;
using namespace bench;  // the streaming client the tests read the server with
using namespace std::chrono_literals;

Json post(TestServer& s, const std::string& path, const std::string& body, int* status = nullptr,
          const httplib::Headers& headers = {}) {
  auto c = s.client();
  auto r = c.Post(path, headers, body, "application/json");
  EXPECT_TRUE(r) << "no response from " << path;
  if (!r) return Json();
  if (status != nullptr) *status = r->status;
  return Json::parse(r->body, nullptr, false);
}

struct Streamed {
  int status = 0;
  std::vector<Json> chunks;
  bool done = false;
  int pings = 0;
  std::string body;
};

Streamed stream(TestServer& s, const std::string& path, const std::string& body, int stop_after = -1) {
  auto c = s.client();
  Streamed out;
  int seen = 0;
  const StreamResult r = post_stream(c, path, body, {}, [&](const SseParser::Event& e) {
    if (e.comment) {
      ++out.pings;
      return true;
    }
    if (e.data == "[DONE]") {
      out.done = true;
      return true;
    }
    out.chunks.push_back(Json::parse(e.data));
    return stop_after < 0 || ++seen < stop_after;
  });
  out.status = r.status;
  out.body = r.body;
  return out;
}

std::string completion_text(const Streamed& s) {
  std::string text;
  for (const Json& c : s.chunks) {
    if (c.contains("choices") && !c["choices"].empty()) text += c["choices"][0].value("text", "");
  }
  return text;
}

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override { DSV4_REQUIRE_TOKENIZER(); }
  const Tokenizer& tok() { return *servertest::real_tokenizer(); }
};

TEST_F(HttpServerTest, InfoEndpoints) {
  TestServer s;
  auto c = s.client();
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  const Json models = Json::parse(c.Get("/v1/models")->body);
  EXPECT_EQ(models["data"][0]["id"], "test-model");
  EXPECT_EQ(models["data"][0]["max_model_len"], 4096);
  EXPECT_EQ(Json::parse(c.Get("/version")->body)["version"], "0.1.0");
  auto missing = c.Get("/v2/nothing");
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(Json::parse(missing->body)["error"]["type"], "not_found_error");
  const Json t = post(s, "/tokenize", R"({"prompt": "Hello world"})");
  EXPECT_EQ(t["tokens"].get<std::vector<int32_t>>(), tok().encode("Hello world"));
  EXPECT_EQ(t["count"], t["tokens"].size());
  const Json d = post(s, "/detokenize", Json{{"tokens", t["tokens"]}}.dump());
  EXPECT_EQ(d["prompt"], "Hello world");
  const Json chat_t = post(s, "/tokenize", R"({"messages": [{"role": "user", "content": "Hi"}]})");
  EXPECT_EQ(chat_t["tokens"][0], 0);  // the encoder's BOS
}

TEST_F(HttpServerTest, EverythingAnswers503WhileLoading) {
  ServerConfig config;
  config.port = 0;
  HttpServer loading(config);
  loading.start();
  httplib::Client c("127.0.0.1", loading.port());
  const auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 503);
  EXPECT_EQ(Json::parse(h->body)["error"]["message"], "Loading model");
  EXPECT_EQ(Json::parse(h->body)["error"]["type"], "unavailable_error");
  EXPECT_EQ(h->get_header_value("Retry-After"), "1");  // every 503 says when to retry
  EXPECT_EQ(c.Post("/v1/completions", R"({"prompt": "x"})", "application/json")->status, 503);
  EXPECT_EQ(c.Post("/v1/chat/completions", R"({"messages": []})", "application/json")->status, 503);
  EXPECT_EQ(c.Get("/v1/models")->status, 503);
  EXPECT_EQ(c.Get("/metrics")->status, 503);
  loading.stop();
}

TEST_F(HttpServerTest, CompletionStreamEqualsNonStream) {
  TestServer s;
  const size_t n = s.script().size();
  const std::string req = fmt::format(R"({{"model": "test-model", "prompt": "Say it", "max_tokens": {}}})", n);
  int status = 0;
  const Json r = post(s, "/v1/completions", req, &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_EQ(r["choices"][0]["text"], "Hello world! This is a scripted answer.");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["prompt_tokens"], tok().encode("Say it").size());  // no BOS added
  EXPECT_EQ(r["usage"]["completion_tokens"], n);
  const Streamed st = stream(s, "/v1/completions",
                             fmt::format(R"({{"prompt": "Say it", "max_tokens": {}, "stream": true,
                                 "stream_options": {{"include_usage": true}}}})",
                                         n));
  ASSERT_EQ(st.status, 200);
  EXPECT_TRUE(st.done);
  EXPECT_EQ(completion_text(st), r["choices"][0]["text"]);
  ASSERT_FALSE(st.chunks.empty());
  EXPECT_TRUE(st.chunks.back()["choices"].empty());
  EXPECT_EQ(st.chunks.back()["usage"]["completion_tokens"], n);
  EXPECT_TRUE(s.wait_idle());
}

TEST_F(HttpServerTest, ChatNonStreamStreamAndChoices) {
  TestServer s;
  const std::string msgs = R"("messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5)";
  const Json r = post(s, "/v1/chat/completions", "{" + msgs + R"(, "n": 2})");
  ASSERT_EQ(r["choices"].size(), 2u) << r.dump();
  const std::string expected = tok().decode(std::vector<int32_t>(s.script().begin(), s.script().begin() + 5));
  for (const Json& ch : r["choices"]) {
    EXPECT_EQ(ch["message"]["role"], "assistant");
    EXPECT_EQ(ch["message"]["content"], expected);
    EXPECT_FALSE(ch["message"].contains("reasoning_content"));
  }
  EXPECT_EQ(r["usage"]["completion_tokens"], 10);
  const Streamed st = stream(s, "/v1/chat/completions", "{" + msgs + R"(, "stream": true})");
  ASSERT_TRUE(st.done);
  EXPECT_EQ(st.chunks.front()["choices"][0]["delta"]["role"], "assistant");
  std::string content;
  for (const Json& c : st.chunks) content += c["choices"][0]["delta"].value("content", "");
  EXPECT_EQ(content, expected);
  EXPECT_EQ(st.chunks.back()["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(st.chunks.back()["object"], "chat.completion.chunk");
}

TEST_F(HttpServerTest, ThinkingRequestReturnsReasoningUnderBothNames) {
  TestServerOptions o;
  o.script_text = "Let me think.</think>The answer.";
  TestServer s(o);
  const Json r = post(s, "/v1/chat/completions",
                      fmt::format(R"({{"messages": [{{"role": "user", "content": "Q"}}],
      "max_tokens": {}, "chat_template_kwargs": {{"thinking": true}}}})",
                                  s.script().size()));
  EXPECT_EQ(r["choices"][0]["message"]["reasoning_content"], "Let me think.");
  EXPECT_EQ(r["choices"][0]["message"]["reasoning"], "Let me think.");
  EXPECT_EQ(r["choices"][0]["message"]["content"], "The answer.");
}

TEST_F(HttpServerTest, DsmlToolCallsBecomeOpenAiToolCalls) {
  TestServerOptions o;
  o.script_text =
      "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" "
      "string=\"true\">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls><｜end▁of▁sentence｜>";
  TestServer s(o);
  const std::string req = R"({"messages": [{"role": "user", "content": "Weather?"}], "max_tokens": 200,
      "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]})";
  const Json r = post(s, "/v1/chat/completions", req);
  const Json& ch = r["choices"][0];
  EXPECT_EQ(ch["finish_reason"], "tool_calls") << r.dump();
  ASSERT_EQ(ch["message"]["tool_calls"].size(), 1u);
  EXPECT_EQ(ch["message"]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(Json::parse(ch["message"]["tool_calls"][0]["function"]["arguments"].get<std::string>())["city"], "Paris");
  EXPECT_TRUE(ch["message"]["content"].is_null());
  const Streamed st = stream(s, "/v1/chat/completions", req.substr(0, req.size() - 1) + R"(, "stream": true})");
  int calls = 0;
  for (const Json& c : st.chunks) calls += c["choices"][0]["delta"].contains("tool_calls");
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(st.chunks.back()["choices"][0]["finish_reason"], "tool_calls");
}

TEST_F(HttpServerTest, StopStringsAndStopTokenIds) {
  TestServer s;
  const Json r = post(s, "/v1/completions", R"({"prompt": "x", "max_tokens": 50, "stop": ["This"]})");
  EXPECT_EQ(r["choices"][0]["text"], "Hello world! ");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(r["choices"][0]["stop_reason"], "This");
  const Json inc = post(s, "/v1/completions",
                        R"({"prompt": "x", "max_tokens": 50, "stop": "This", "include_stop_str_in_output": true})");
  EXPECT_EQ(inc["choices"][0]["text"], "Hello world! This");
  const int32_t third = s.script()[2];
  const Json ids =
      post(s, "/v1/completions", fmt::format(R"({{"prompt": "x", "max_tokens": 50, "stop_token_ids": [{}]}})", third));
  EXPECT_EQ(ids["choices"][0]["stop_reason"], third);
  EXPECT_EQ(ids["choices"][0]["text"], tok().decode(std::vector<int32_t>(s.script().begin(), s.script().begin() + 2)));
  EXPECT_EQ(ids["usage"]["completion_tokens"], 3);
  // Streaming stops the same way, and the engine request is gone.
  const Streamed st =
      stream(s, "/v1/completions", R"({"prompt": "x", "max_tokens": 50, "stop": ["This"], "stream": true})");
  EXPECT_EQ(completion_text(st), "Hello world! ");
  EXPECT_EQ(st.chunks.back()["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(s.wait_idle());
}

TEST_F(HttpServerTest, Logprobs) {
  TestServer s;
  const Json r = post(s, "/v1/completions", R"({"prompt": "x", "max_tokens": 3, "logprobs": 2})");
  const Json& lp = r["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 3u) << r.dump();
  EXPECT_EQ(lp["token_logprobs"][0], -0.5);
  EXPECT_GE(lp["top_logprobs"][0].size(), 2u);
  EXPECT_EQ(lp["text_offset"][0], 0);
  const Json c = post(
      s, "/v1/chat/completions",
      R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "logprobs": true, "top_logprobs": 1})");
  const Json& content = c["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2u) << c.dump();
  EXPECT_EQ(content[0]["top_logprobs"].size(), 1u);
  EXPECT_TRUE(content[0]["bytes"].is_array());
}

struct BadCase {
  const char* name;
  const char* path;
  std::string body;
  int status;
  const char* type;
  const char* message_part;
};

TEST_F(HttpServerTest, BadRequestTable) {
  TestServerOptions o;
  o.config.max_request_bytes = 4096;
  o.max_model_len = 1024;
  TestServer s(o);
  const std::vector<BadCase> cases = {
      {"malformed json", "/v1/chat/completions", R"({"messages": [)", 400, "invalid_request_error", "not valid JSON"},
      {"not an object", "/v1/completions", "[]", 400, "invalid_request_error", "JSON object"},
      {"wrong type", "/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"})", 400, "invalid_request_error",
       "'temperature' must be a number"},
      {"bad role", "/v1/chat/completions", R"({"messages": [{"role": "bot", "content": "x"}]})", 400,
       "invalid_request_error", "unknown role"},
      {"missing prompt", "/v1/completions", R"({"max_tokens": 3})", 400, "invalid_request_error",
       "'prompt' is required"},
      {"unknown model", "/v1/completions", R"({"model": "gpt-9", "prompt": "x"})", 404, "not_found_error",
       "does not exist"},
      {"over-long prompt", "/v1/completions", Json{{"prompt", std::vector<int>(1100, 5)}}.dump(), 400,
       "invalid_request_error", "maximum context length is 1024 tokens"},
      {"prompt + max_tokens too long", "/v1/completions", R"({"prompt": "x", "max_tokens": 5000})", 400,
       "invalid_request_error", "maximum context length"},
      {"token id out of vocabulary", "/v1/completions", R"({"prompt": [999999999]})", 400, "invalid_request_error",
       "vocabulary"},
      {"echo", "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "echo": true})", 400,
       "invalid_request_error", "not supported"},
      {"echo with logprobs, streamed", "/v1/completions",
       R"({"prompt": "x", "echo": true, "logprobs": 1, "stream": true})", 400, "invalid_request_error",
       "not available when 'stream' is true"},
      {"response_format", "/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "structural_tag"}})", 400,
       "invalid_request_error", "not supported"},
      {"payload too large", "/v1/completions", Json{{"prompt", std::string(8000, 'a')}}.dump(), 413,
       "invalid_request_error", "--max-request-bytes"},
  };
  for (const BadCase& b : cases) {
    int status = 0;
    const Json r = post(s, b.path, b.body, &status);
    EXPECT_EQ(status, b.status) << b.name << ": " << r.dump();
    EXPECT_EQ(r["error"]["type"], b.type) << b.name;
    EXPECT_NE(r["error"]["message"].get<std::string>().find(b.message_part), std::string::npos)
        << b.name << ": " << r["error"]["message"];
  }
  int status = 0;
  const Json over = post(s, "/v1/completions", Json{{"prompt", std::vector<int>(1100, 5)}}.dump(), &status);
  EXPECT_EQ(over["error"]["code"], "context_length_exceeded");
  EXPECT_TRUE(s.wait_idle());
}

TEST_F(HttpServerTest, ApiKey) {
  TestServerOptions o;
  o.config.api_key = "sekret";
  TestServer s(o);
  int status = 0;
  const Json r = post(s, "/v1/completions", R"({"prompt": "x", "max_tokens": 1})", &status);
  EXPECT_EQ(status, 401);
  EXPECT_EQ(r["error"]["type"], "authentication_error");
  post(s, "/v1/completions", R"({"prompt": "x", "max_tokens": 1})", &status, {{"Authorization", "Bearer wrong!"}});
  EXPECT_EQ(status, 401);
  post(s, "/v1/completions", R"({"prompt": "x", "max_tokens": 1})", &status, {{"Authorization", "Bearer sekret"}});
  EXPECT_EQ(status, 200);
  EXPECT_EQ(s.client().Get("/health")->status, 200);  // probes need no key
}

TEST_F(HttpServerTest, FullQueueAnswers503) {
  TestServerOptions o;
  o.step_delay = 20ms;
  o.config.max_num_seqs = 1;
  o.config.max_waiting_requests = 0;
  TestServer s(o);
  auto busy = std::async(std::launch::async,
                         [&] { return post(s, "/v1/completions", R"({"prompt": "x", "max_tokens": 20})"); });
  std::this_thread::sleep_for(100ms);
  int status = 0;
  const Json r = post(s, "/v1/completions", R"({"prompt": "x", "max_tokens": 1})", &status);
  EXPECT_EQ(status, 503);
  EXPECT_EQ(r["error"]["type"], "unavailable_error");
  EXPECT_EQ(r["error"]["code"], "queue_full");
  const auto again = s.client().Post("/v1/completions", R"({"prompt": "x", "max_tokens": 1})", "application/json");
  EXPECT_EQ(again->status, 503);
  EXPECT_EQ(again->get_header_value("Retry-After"), "1");  // every 503 says when to retry
  EXPECT_EQ(busy.get()["choices"][0]["finish_reason"], "length");
  post(s, "/v1/completions", R"({"prompt": "x", "max_tokens": 1})", &status);
  EXPECT_EQ(status, 200);
}

TEST_F(HttpServerTest, StreamingClientDisconnectAbortsAndFreesKv) {
  TestServerOptions o;
  o.step_delay = 10ms;
  TestServer s(o);
  const auto t0 = std::chrono::steady_clock::now();
  const Streamed st = stream(s, "/v1/completions", R"({"prompt": "x", "max_tokens": 2000, "stream": true})", 3);
  EXPECT_EQ(st.chunks.size(), 3u);
  EXPECT_TRUE(s.wait_idle(3s));  // 2000 steps would take 20 s
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_EQ(s.engine().stats().requests_aborted, 1u);
}

TEST_F(HttpServerTest, NonStreamingClientDisconnectAbortsToo) {
  TestServerOptions o;
  o.step_delay = 10ms;
  TestServer s(o);
  {
    httplib::Client c("127.0.0.1", s.port());
    c.set_read_timeout(0, 300000);  // gives up after 0.3 s and closes the connection
    auto r = c.Post("/v1/completions", R"({"prompt": "x", "max_tokens": 2000})", "application/json");
    EXPECT_FALSE(r);
  }
  EXPECT_TRUE(s.wait_idle(3s));
  EXPECT_EQ(s.engine().stats().requests_aborted, 1u);
}

TEST_F(HttpServerTest, KeepAlivePingsDuringSilence) {
  TestServerOptions o;
  o.step_delay = 60ms;
  o.config.sse_ping_interval = 0.02;
  TestServer s(o);
  const Streamed st = stream(s, "/v1/completions", R"({"prompt": "x", "max_tokens": 4, "stream": true})");
  EXPECT_TRUE(st.done);
  EXPECT_GT(st.pings, 0);
}

TEST_F(HttpServerTest, EngineFailureGives500AndUnhealthy) {
  TestServer s;
  s.fail_at_step(1);
  int status = 0;
  const Json r = post(s, "/v1/completions", R"({"prompt": "x", "max_tokens": 5})", &status);
  EXPECT_EQ(status, 500);
  EXPECT_EQ(r["error"]["type"], "server_error");
  EXPECT_NE(r["error"]["message"].get<std::string>().find("injected failure"), std::string::npos);
  EXPECT_FALSE(s.engine().healthy());
  EXPECT_EQ(s.client().Get("/health")->status, 503);
  s.server().fail("test");
  EXPECT_EQ(s.client().Get("/health"), nullptr);  // stopped listening
}

TEST_F(HttpServerTest, StreamGetsAnErrorEventWhenTheEngineFails) {
  TestServerOptions o;
  o.step_delay = 5ms;
  TestServer s(o);
  s.fail_at_step(3);
  const Streamed st = stream(s, "/v1/completions", R"({"prompt": "x", "max_tokens": 50, "stream": true})");
  ASSERT_FALSE(st.chunks.empty());
  EXPECT_TRUE(st.chunks.back().contains("error")) << st.chunks.back().dump();
  EXPECT_EQ(st.chunks.back()["error"]["code"], 500);
  EXPECT_TRUE(st.done);
}

TEST_F(HttpServerTest, DrainFinishesInFlightAndRefusesNew) {
  TestServerOptions o;
  o.step_delay = 10ms;
  o.config.shutdown_timeout = 5;
  TestServer s(o);
  auto in_flight = std::async(std::launch::async,
                              [&] { return post(s, "/v1/completions", R"({"prompt": "x", "max_tokens": 20})"); });
  std::this_thread::sleep_for(50ms);
  auto draining = std::async(std::launch::async, [&] { s.server().drain(); });
  std::this_thread::sleep_for(20ms);
  int status = 0;
  post(s, "/v1/completions", R"({"prompt": "x", "max_tokens": 1})", &status);
  EXPECT_EQ(status, 503);
  EXPECT_EQ(in_flight.get()["choices"][0]["finish_reason"], "length");
  draining.get();
}

TEST_F(HttpServerTest, AResponsesStreamAbortedAtShutdownEndsCancelled) {
  TestServerOptions o;
  o.step_delay = 10ms;
  o.config.shutdown_timeout = 0.1;  // the in-flight stream outlives it and is aborted
  TestServer s(o);
  auto streamed = std::async(std::launch::async, [&] {
    return stream(s, "/v1/responses", R"({"input": "x", "max_output_tokens": 3000, "stream": true})");
  });
  std::this_thread::sleep_for(100ms);
  s.server().drain();
  const Streamed st = streamed.get();
  ASSERT_FALSE(st.chunks.empty());
  EXPECT_EQ(st.chunks.front()["type"], "response.created");
  EXPECT_EQ(st.chunks.back()["type"], "response.incomplete") << st.chunks.back().dump();
  EXPECT_EQ(st.chunks.back()["response"]["status"], "cancelled");
  EXPECT_FALSE(st.done);  // no "data: [DONE]" on this API
}

TEST_F(HttpServerTest, MetricsAfterTraffic) {
  TestServer s;
  post(s, "/v1/completions", R"({"prompt": "x", "max_tokens": 4})");
  stream(s, "/v1/completions", R"({"prompt": "x", "max_tokens": 4, "stream": true})");
  ASSERT_TRUE(s.wait_idle());
  const std::string m = s.client().Get("/metrics")->body;
  for (const char* name :
       {"vllm:num_requests_running{", "vllm:num_requests_waiting{", "vllm:kv_cache_usage_perc{",
        "vllm:prefix_cache_queries_total{", "vllm:prefix_cache_hits_total{", "vllm:num_preemptions_total{",
        "vllm:prompt_tokens_total{", "vllm:generation_tokens_total{", "vllm:time_to_first_token_seconds_bucket{",
        "vllm:inter_token_latency_seconds_count{", "vllm:e2e_request_latency_seconds_sum{", "dsv4:kv_pool_used_pages{",
        "dsv4:kv_group_prefix_hit_rate{", "dsv4:kv_group_usage_perc{"}) {
    EXPECT_NE(m.find(name), std::string::npos) << name;
  }
  EXPECT_NE(m.find("vllm:generation_tokens_total{model_name=\"test-model\",engine=\"0\"} 8"), std::string::npos) << m;
  EXPECT_NE(m.find("vllm:e2e_request_latency_seconds_count{model_name=\"test-model\",engine=\"0\"} 2"),
            std::string::npos);
}

}  // namespace
}  // namespace dsv4::server
