// vLLM's and OpenAI's HTTP conventions the server follows: 405 with Allow for a wrong method, 400 (not a
// retryable 503) for more choices than the server ever admits, the completions default of 16 tokens (chat
// keeps --default-max-tokens), and text_offset counted in characters. Retry-After on every 503:
// HttpServerTest.EverythingAnswers503WhileLoading and .FullQueueAnswers503.
#include <gtest/gtest.h>

#include <future>

#include "core/utf8.h"
#include "server_test_support.h"

namespace dsv4::server {
namespace {

using servertest::TestServer;
using servertest::TestServerOptions;
using namespace std::chrono_literals;

class ApiConventionsTest : public ::testing::Test {
 protected:
  void SetUp() override { DSV4_REQUIRE_TOKENIZER(); }
};

httplib::Result post(TestServer& s, const std::string& path, const std::string& body) {
  return s.client().Post(path, body, "application/json");
}

TEST_F(ApiConventionsTest, WrongMethodIs405WithAllow) {
  TestServer s;
  auto c = s.client();
  struct Case {
    httplib::Result r;
    const char* allow;
  };
  Case cases[] = {{c.Get("/v1/completions"), "POST"},
                  {c.Get("/v1/chat/completions"), "POST"},
                  {c.Post("/health", "{}", "application/json"), "GET, HEAD"},
                  {c.Delete("/v1/models"), "GET, HEAD"},
                  {c.Put("/tokenize", "{}", "application/json"), "POST"}};
  for (const Case& k : cases) {
    ASSERT_TRUE(k.r);
    EXPECT_EQ(k.r->status, 405) << k.r->body;
    EXPECT_EQ(k.r->get_header_value("Allow"), k.allow);
    const Json e = Json::parse(k.r->body)["error"];
    EXPECT_EQ(e["type"], "invalid_request_error");
    EXPECT_EQ(e["code"], "method_not_allowed");
    EXPECT_NE(e["message"].get<std::string>().find(k.allow), std::string::npos) << e.dump();
  }
  EXPECT_EQ(c.Head("/health")->status, 200);  // HEAD goes with GET
  EXPECT_EQ(c.Put("/ping", "{}", "application/json")->get_header_value("Allow"), "GET, HEAD, POST");
  EXPECT_EQ(c.Get("/v1/embeddings")->status, 404);  // an unknown path stays 404
  EXPECT_EQ(c.Get("/v1/embeddings")->get_header_value("Allow"), "");
}

// SageMaker's probe (vLLM serves it): /health's answer by GET or POST, without the API key.
TEST_F(ApiConventionsTest, PingAnswersAsHealthByGetOrPost) {
  TestServerOptions o;
  o.config.api_key = "sekret";
  TestServer s(o);
  auto c = s.client();
  for (const auto& r : {c.Get("/ping"), c.Post("/ping", "", "application/json")}) {
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(Json::parse(r->body)["status"], "ok");
  }
  EXPECT_EQ(c.Get("/v1/models")->status, 401);  // the key still guards the rest
  EXPECT_EQ(c.Post("/invocations", R"({"prompt": "x", "max_tokens": 1})", "application/json")->status, 401);
}

// SageMaker's inference route: a body with messages is a chat completion, one with a prompt a completion.
TEST_F(ApiConventionsTest, InvocationsRouteByTheBody) {
  TestServer s;
  const auto chat = post(s, "/invocations", R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})");
  ASSERT_TRUE(chat);
  EXPECT_EQ(chat->status, 200) << chat->body;
  EXPECT_EQ(Json::parse(chat->body)["object"], "chat.completion");
  const auto text = post(s, "/invocations", R"({"prompt": "hi", "max_tokens": 2})");
  ASSERT_TRUE(text);
  EXPECT_EQ(text->status, 200) << text->body;
  EXPECT_EQ(Json::parse(text->body)["object"], "text_completion");
  for (const char* bad : {R"({"input": "hi"})", "[1]", "{"}) {
    const auto r = post(s, "/invocations", bad);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << bad;
    EXPECT_EQ(Json::parse(r->body)["error"]["type"], "invalid_request_error") << r->body;
  }
  const auto none = post(s, "/invocations", R"({"input": "hi"})");
  EXPECT_NE(Json::parse(none->body)["error"]["message"].get<std::string>().find("\"messages\""), std::string::npos);
}

TEST_F(ApiConventionsTest, MoreChoicesThanTheServerEverAdmitsIs400) {
  TestServerOptions o;
  o.step_delay = 10ms;
  o.config.max_num_seqs = 2;
  o.config.max_waiting_requests = 2;
  TestServer s(o);
  const auto never = post(s, "/v1/completions", R"({"prompt": "x", "max_tokens": 1, "n": 5})");
  ASSERT_TRUE(never);
  EXPECT_EQ(never->status, 400) << never->body;
  const Json e = Json::parse(never->body)["error"];
  EXPECT_EQ(e["param"], "n");
  EXPECT_NE(e["message"].get<std::string>().find("--max-num-seqs + --max-waiting-requests"), std::string::npos);
  // Two prompts x n = 3 is 6 engine requests: also more than 4.
  EXPECT_EQ(post(s, "/v1/completions", R"({"prompt": ["x", "y"], "max_tokens": 1, "n": 3})")->status, 400);
  // Four fit when nothing else runs; beside a running one they are a moment's overload: 503.
  EXPECT_EQ(post(s, "/v1/completions", R"({"prompt": "x", "max_tokens": 1, "n": 4})")->status, 200);
  auto busy = std::async(std::launch::async,
                         [&] { return post(s, "/v1/completions", R"({"prompt": "x", "max_tokens": 30})"); });
  for (int i = 0; i < 500 && s.engine().stats().running == 0; ++i) std::this_thread::sleep_for(2ms);
  EXPECT_EQ(post(s, "/v1/completions", R"({"prompt": "x", "max_tokens": 1, "n": 4})")->status, 503);
  EXPECT_EQ(busy.get()->status, 200);
}

TEST_F(ApiConventionsTest, CompletionsDefaultTo16TokensChatToDefaultMaxTokens) {
  TestServerOptions o;
  o.config.default_max_tokens = 40;
  TestServer s(o);
  const auto completion = [&](const std::string& body) {
    return Json::parse(post(s, "/v1/completions", body)->body)["usage"]["completion_tokens"];
  };
  EXPECT_EQ(completion(R"({"prompt": "x", "ignore_eos": true})"), 16);  // vLLM's default
  EXPECT_EQ(completion(R"({"prompt": "x", "max_tokens": 25, "ignore_eos": true})"), 25);
  const Json chat = Json::parse(
      post(s, "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "ignore_eos": true})")->body);
  EXPECT_EQ(chat["usage"]["completion_tokens"], 40);  // chat has no such default: --default-max-tokens

  TestServerOptions low;
  low.config.default_max_tokens = 6;  // a server default below 16 wins (vLLM takes the smallest)
  TestServer t(low);
  EXPECT_EQ(
      Json::parse(
          post(t, "/v1/completions", R"({"prompt": "x", "ignore_eos": true})")->body)["usage"]["completion_tokens"],
      6);
}

TEST_F(ApiConventionsTest, TextOffsetCountsCharactersNotBytes) {
  const std::string text = "Grüße aus Köln, 世界! ✓ ok";
  const size_t characters = std::u32string(U"Grüße aus Köln, 世界! ✓ ok").size();
  ASSERT_LT(characters, text.size());  // the script has multi-byte characters
  TestServerOptions o;
  o.script_text = text;
  TestServer s(o);
  const size_t n = s.script().size();
  const auto r = post(s, "/v1/completions", fmt::format(R"({{"prompt": "x", "max_tokens": {}, "logprobs": 0}})", n));
  const Json body = Json::parse(r->body);
  ASSERT_EQ(body["choices"][0]["text"], text) << r->body;
  const Json& lp = body["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), n);
  const auto chars = [](const std::string& t) {  // Python's len(): one per code point
    size_t k = 0;
    for (size_t i = 0; i < t.size(); i += utf8::char_length(static_cast<unsigned char>(t[i]))) ++k;
    return k;
  };
  size_t expected = 0;
  bool whole = true;  // every token a run of whole characters (no U+FFFD for a split one)
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(lp["text_offset"][i], expected) << "token " << i;
    const std::string t = lp["tokens"][i];
    whole = whole && t.find("\xEF\xBF\xBD") == std::string::npos;
    expected += chars(t);
  }
  if (whole) {
    EXPECT_EQ(expected, characters);
  }
}

}  // namespace
}  // namespace dsv4::server
