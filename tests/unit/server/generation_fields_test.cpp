// The vLLM request fields this milestone made work, end to end through the HTTP server over an engine
// whose executor is scripted (server_test_support.h), which records what the engine was asked to run:
// allowed_token_ids and bad_words reach the sampler, truncate_prompt_tokens cuts the prompt the engine
// gets, continue_final_message / prefix / add_generation_prompt shape the chat prompt, include_reasoning,
// return_tokens_as_token_ids, parallel_tool_calls, skip_special_tokens and request_id shape the answer,
// and priority orders the queue under --scheduling-policy priority. Fresh random inputs each run.
#include <gtest/gtest.h>

#include <future>
#include <map>
#include <numeric>
#include <random>
#include <sstream>

#include "chat/assistant_prefill.h"
#include "server_test_support.h"

namespace dsv4::server {
namespace {

using servertest::TestServer;
using servertest::TestServerOptions;
using namespace std::chrono_literals;

Json post(TestServer& s, const std::string& path, const Json& body, int* status = nullptr) {
  auto r = s.client().Post(path, body.dump(), "application/json");
  EXPECT_TRUE(r) << "no response from " << path;
  if (!r) return Json();
  if (status != nullptr) *status = r->status;
  return Json::parse(r->body, nullptr, false);
}

Json chat(std::initializer_list<Json> messages, int max_tokens = 3) {
  Json list = Json::array();
  for (const Json& m : messages) list.push_back(m);
  return Json{{"messages", std::move(list)}, {"max_tokens", max_tokens}};
}
Json msg(const std::string& role, const std::string& content) { return Json{{"role", role}, {"content", content}}; }

// The SSE "data:" payloads of a streamed answer (without [DONE]).
std::vector<Json> sse_chunks(const std::string& body) {
  std::vector<Json> out;
  std::istringstream in(body);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("data: ", 0) == 0 && line != "data: [DONE]") out.push_back(Json::parse(line.substr(6)));
  }
  return out;
}

class GenerationFields : public ::testing::Test {
 protected:
  void SetUp() override {
    DSV4_REQUIRE_TOKENIZER();
    const uint32_t seed = std::random_device{}();
    RecordProperty("seed", std::to_string(seed));
    trace_ = std::make_unique<::testing::ScopedTrace>(__FILE__, __LINE__, "seed " + std::to_string(seed));
    rng_.seed(seed);
  }
  const Tokenizer& tok() { return *servertest::real_tokenizer(); }
  int32_t random_id() { return static_cast<int32_t>(1000 + rng_() % 100000); }
  std::string random_word() {
    static const char* words[] = {"apple", "river", "quantum", "violet", "engine", "marble", "kettle", "orbit"};
    return std::string(words[rng_() % 8]) + std::to_string(rng_() % 100);
  }

  std::mt19937 rng_;
  std::unique_ptr<::testing::ScopedTrace> trace_;
};

// return_token_ids (vLLM's): the prompt's ids and each choice's generated ids in the answer, streamed or not.
TEST_F(GenerationFields, ReturnTokenIdsNamesThePromptAndEachChoicesTokens) {
  TestServerOptions o;
  o.step_delay = 15ms;  // a token an update when streamed
  TestServer s(o);
  const std::string text = "Hello there";
  const std::vector<int32_t> prompt = tok().encode(text);
  const Json asked{{"prompt", text}, {"max_tokens", 4}, {"return_token_ids", true}};
  const Json done = post(s, "/v1/completions", asked);
  const Json& choice = done["choices"][0];
  EXPECT_EQ(choice["prompt_token_ids"].get<std::vector<int32_t>>(), prompt);
  const auto ids = choice["token_ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(ids.size(), 4u);
  EXPECT_EQ(tok().decode(ids), choice["text"].get<std::string>());
  // Streamed: the prompt's ids once, with the choice's first chunk; the generated ids chunk by chunk.
  Json streamed = asked;
  streamed["stream"] = true;
  const auto r = s.client().Post("/v1/completions", streamed.dump(), "application/json");
  ASSERT_TRUE(r);
  std::vector<int32_t> got;
  int prompts = 0, with_ids = 0;
  for (const Json& chunk : sse_chunks(r->body)) {
    if (chunk["choices"].empty()) continue;
    const Json& c = chunk["choices"][0];
    if (c.contains("prompt_token_ids")) {
      ++prompts;
      EXPECT_EQ(c["prompt_token_ids"].get<std::vector<int32_t>>(), prompt);
    }
    with_ids += c.contains("token_ids") && !c["token_ids"].empty();
    for (const int32_t id : c.value("token_ids", std::vector<int32_t>{})) got.push_back(id);
  }
  EXPECT_GT(with_ids, 1);
  EXPECT_EQ(prompts, 1);
  EXPECT_EQ(got, ids);
  // Chat: the prompt's ids at the top level, the generated ones per choice; not asked, neither.
  Json c = chat({msg("user", "Hi")});
  c["return_token_ids"] = true;
  const Json answer = post(s, "/v1/chat/completions", c);
  EXPECT_FALSE(answer["prompt_token_ids"].empty()) << answer.dump();
  EXPECT_EQ(answer["choices"][0]["token_ids"].size(), 3u) << answer.dump();
  const Json plain = post(s, "/v1/completions", Json{{"prompt", text}, {"max_tokens", 1}});
  EXPECT_FALSE(plain["choices"][0].contains("token_ids"));
  EXPECT_FALSE(plain["choices"][0].contains("prompt_token_ids"));
}

TEST_F(GenerationFields, AllowedTokenIdsAndBadWordsReachTheSampler) {
  TestServer s;
  const std::vector<int32_t> allowed = {random_id(), random_id(), random_id()};
  const std::string w1 = random_word(), w2 = " " + random_word();
  const Json r =
      post(s, "/v1/completions",
           Json{{"prompt", "x"}, {"max_tokens", 2}, {"allowed_token_ids", allowed}, {"bad_words", {w1, w2, "Hello"}}});
  ASSERT_TRUE(r.contains("choices")) << r.dump();
  const auto sub = s.submitted();
  ASSERT_EQ(sub.size(), 1u);
  EXPECT_EQ(sub[0].params.allowed_token_ids, allowed);
  // vLLM's rule, written out: each word (leading spaces stripped) alone, and after a space when that
  // starts with another token and has as many tokens.
  std::vector<std::vector<int32_t>> want;
  for (std::string w : {w1, w2, std::string("Hello")}) {
    w.erase(0, w.find_first_not_of(' '));
    const auto alone = tok().encode(w), spaced = tok().encode(" " + w);
    want.push_back(alone);
    if (spaced.front() != alone.front() && spaced.size() == alone.size()) want.push_back(spaced);
  }
  EXPECT_EQ(sub[0].params.bad_words, want);
  // "Hello" and " Hello" are one token each: both forms are banned (random words may be split unevenly).
  EXPECT_NE(std::find(want.begin(), want.end(), tok().encode(" Hello")), want.end());
  // Chat requests carry them the same way.
  Json c = chat({msg("user", "Hi")});
  c["allowed_token_ids"] = allowed;
  post(s, "/v1/chat/completions", c);
  EXPECT_EQ(s.submitted().at(0).params.allowed_token_ids, allowed);
}

TEST_F(GenerationFields, TruncatePromptTokensKeepsTheLastOrFirstTokens) {
  TestServer s;
  std::vector<int32_t> prompt(40);
  for (int32_t& t : prompt) t = random_id();
  const int keep = 5 + static_cast<int>(rng_() % 20);
  Json body = {{"prompt", prompt}, {"max_tokens", 1}, {"truncate_prompt_tokens", keep}};
  const Json left = post(s, "/v1/completions", body);
  EXPECT_EQ(left["usage"]["prompt_tokens"], keep) << left.dump();
  EXPECT_EQ(s.submitted().at(0).prompt, std::vector<int32_t>(prompt.end() - keep, prompt.end()));
  body["truncation_side"] = "right";
  post(s, "/v1/completions", body);
  EXPECT_EQ(s.submitted().at(0).prompt, std::vector<int32_t>(prompt.begin(), prompt.begin() + keep));
  body["truncate_prompt_tokens"] = -1;  // max_model_len: nothing to cut here
  post(s, "/v1/completions", body);
  EXPECT_EQ(s.submitted().at(0).prompt, prompt);
  // Chat: the encoded conversation is what is cut.
  Json c = chat({msg("system", random_word()), msg("user", random_word() + " " + random_word())});
  post(s, "/v1/chat/completions", c);
  const std::vector<int32_t> whole = s.submitted().at(0).prompt;
  c["truncate_prompt_tokens"] = 4;
  post(s, "/v1/chat/completions", c);
  EXPECT_EQ(s.submitted().at(0).prompt, std::vector<int32_t>(whole.end() - 4, whole.end()));
  int status = 0;
  body["truncate_prompt_tokens"] = 5000;  // over max_model_len (4096)
  const Json over = post(s, "/v1/completions", body, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(over["error"]["param"], "truncate_prompt_tokens");
}

// The prompt the engine got for a chat request, as text.
std::string submitted_prompt(TestServer& s, const Tokenizer& tok) {
  const auto sub = s.submitted();
  EXPECT_EQ(sub.size(), 1u);
  return sub.empty() ? "" : tok.decode(sub[0].prompt);
}

TEST_F(GenerationFields, ContinueFinalMessageAndPrefixLeaveTheLastTurnOpen) {
  TestServer s;
  const std::string user = random_word(), start = random_word() + ",";
  chat::EncodeOptions o;
  o.thinking_mode = chat::ThinkingMode::kChat;
  const std::string open =
      chat::encode_chat_prompt(Json::array({msg("user", user), msg("assistant", start)}), o, true).text;
  ASSERT_EQ(open.substr(open.size() - start.size()), start);  // ends with the prefill, no end-of-sentence
  Json c = chat({msg("user", user), msg("assistant", start)});
  c["continue_final_message"] = true;
  c["add_generation_prompt"] = false;
  ASSERT_TRUE(post(s, "/v1/chat/completions", c).contains("choices"));
  EXPECT_EQ(submitted_prompt(s, tok()), open);
  // DeepSeek's prefix completion is the same request.
  Json p = chat({msg("user", user), Json{{"role", "assistant"}, {"content", start}, {"prefix", true}}});
  ASSERT_TRUE(post(s, "/v1/chat/completions", p).contains("choices"));
  EXPECT_EQ(submitted_prompt(s, tok()), open);
  // Without either, a trailing assistant turn is refused (it would be closed and generated after);
  // prefix anywhere but on that turn, or continuing a user turn, too.
  int status = 0;
  Json closed = chat({msg("user", user), msg("assistant", start)});
  EXPECT_EQ(post(s, "/v1/chat/completions", closed, &status)["error"]["param"], "messages");
  EXPECT_EQ(status, 400);
  Json early = chat({Json{{"role", "user"}, {"content", user}, {"prefix", true}}});
  EXPECT_EQ(post(s, "/v1/chat/completions", early, &status)["error"]["param"], "messages[0].prefix");
  Json user_last = chat({msg("user", user)});
  user_last["continue_final_message"] = true;
  EXPECT_EQ(post(s, "/v1/chat/completions", user_last, &status)["error"]["param"], "continue_final_message");
  // add_generation_prompt false: the prompt ends with the user's turn.
  Json no_gen = chat({msg("user", user)});
  no_gen["add_generation_prompt"] = false;
  post(s, "/v1/chat/completions", no_gen);
  const std::string ends = submitted_prompt(s, tok());
  EXPECT_EQ(ends.substr(ends.size() - user.size()), user);
}

TEST_F(GenerationFields, APrefilledReasoningIsContinuedAndParsedAsReasoning) {
  TestServerOptions so;
  so.script_text = " still thinking.</think>The answer.";
  TestServer s(so);
  const int n = static_cast<int>(s.script().size());
  const std::string reasoning = random_word();
  Json c = chat(
      {msg("user", random_word()), Json{{"role", "assistant"}, {"reasoning_content", reasoning}, {"prefix", true}}}, n);
  c["chat_template_kwargs"] = {{"thinking", true}};
  const Json r = post(s, "/v1/chat/completions", c);
  EXPECT_EQ(r["choices"][0]["message"]["reasoning_content"], " still thinking.") << r.dump();
  EXPECT_EQ(r["choices"][0]["message"]["content"], "The answer.");
  const std::string prompt = submitted_prompt(s, tok());
  EXPECT_EQ(prompt.substr(prompt.size() - reasoning.size()), reasoning);  // no </think> after it
  // A prefilled answer: the generated text is content from its first token.
  Json a = chat({msg("user", random_word()), Json{{"role", "assistant"}, {"content", "So"}, {"prefix", true}}}, n);
  a["chat_template_kwargs"] = {{"thinking", true}};
  const Json ra = post(s, "/v1/chat/completions", a);
  EXPECT_FALSE(ra["choices"][0]["message"].contains("reasoning_content")) << ra.dump();
  EXPECT_EQ(ra["choices"][0]["message"]["content"], " still thinking.The answer.");  // a stray </think> is dropped
}

TEST_F(GenerationFields, IncludeReasoningFalseLeavesTheReasoningOut) {
  TestServerOptions so;
  so.script_text = "Let me think.</think>The answer.";
  TestServer s(so);
  Json c = chat({msg("user", random_word())}, static_cast<int>(s.script().size()));
  c["chat_template_kwargs"] = {{"thinking", true}};
  c["include_reasoning"] = false;
  const Json r = post(s, "/v1/chat/completions", c);
  EXPECT_FALSE(r["choices"][0]["message"].contains("reasoning_content")) << r.dump();
  EXPECT_FALSE(r["choices"][0]["message"].contains("reasoning"));
  EXPECT_EQ(r["choices"][0]["message"]["content"], "The answer.");
  c["stream"] = true;
  auto st = s.client().Post("/v1/chat/completions", c.dump(), "application/json");
  ASSERT_TRUE(st);
  std::string content;
  for (const Json& ch : sse_chunks(st->body)) {
    const Json& d = ch["choices"][0]["delta"];
    EXPECT_FALSE(d.contains("reasoning_content") || d.contains("reasoning")) << ch.dump();
    content += d.value("content", "");
  }
  EXPECT_EQ(content, "The answer.");
}

TEST_F(GenerationFields, ReturnTokensAsTokenIdsNamesLogprobTokensById) {
  TestServer s;
  const Json r = post(s, "/v1/completions",
                      Json{{"prompt", "x"}, {"max_tokens", 3}, {"logprobs", 1}, {"return_tokens_as_token_ids", true}});
  const Json& lp = r["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 3u) << r.dump();
  for (size_t i = 0; i < 3; ++i) {
    const std::string name = fmt::format("token_id:{}", s.script()[i]);
    EXPECT_EQ(lp["tokens"][i], name);
    EXPECT_TRUE(lp["top_logprobs"][i].contains(name)) << lp["top_logprobs"][i].dump();
  }
  EXPECT_EQ(lp["text_offset"][1], tok().decode(std::vector<int32_t>{s.script()[0]}).size());  // offsets stay the text's
  Json c = chat({msg("user", "Hi")}, 2);
  c["logprobs"] = true;
  c["top_logprobs"] = 1;
  c["return_tokens_as_token_ids"] = true;
  const Json cr = post(s, "/v1/chat/completions", c);
  const Json& e = cr["choices"][0]["logprobs"]["content"][0];
  EXPECT_EQ(e["token"], fmt::format("token_id:{}", s.script()[0])) << cr.dump();
  EXPECT_EQ(e["top_logprobs"][0]["token"], fmt::format("token_id:{}", s.script()[0]));
  const std::string text = tok().decode(std::vector<int32_t>{s.script()[0]});
  EXPECT_EQ(e["bytes"].size(), text.size());  // the bytes stay the text's
}

TEST_F(GenerationFields, ParallelToolCallsFalseKeepsTheFirstCall) {
  TestServerOptions so;
  so.script_text =
      "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"a\">\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"b\">\n"
      "</｜DSML｜invoke>\n</｜DSML｜tool_calls><｜end▁of▁sentence｜>";
  TestServer s(so);
  Json c = chat({msg("user", "go")}, static_cast<int>(s.script().size()));
  c["tools"] = Json::array(
      {{{"type", "function"}, {"function", {{"name", "a"}}}}, {{"type", "function"}, {"function", {{"name", "b"}}}}});
  EXPECT_EQ(post(s, "/v1/chat/completions", c)["choices"][0]["message"]["tool_calls"].size(), 2u);
  c["parallel_tool_calls"] = false;
  const Json r = post(s, "/v1/chat/completions", c);
  ASSERT_EQ(r["choices"][0]["message"]["tool_calls"].size(), 1u) << r.dump();
  EXPECT_EQ(r["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "a");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls");
}

TEST_F(GenerationFields, SkipSpecialTokensFalseKeepsThemInChatContent) {
  TestServerOptions so;
  so.script_text = "a<｜User｜>b";
  TestServer s(so);
  Json c = chat({msg("user", "go")}, static_cast<int>(s.script().size()));
  EXPECT_EQ(post(s, "/v1/chat/completions", c)["choices"][0]["message"]["content"], "ab");
  c["skip_special_tokens"] = false;
  EXPECT_EQ(post(s, "/v1/chat/completions", c)["choices"][0]["message"]["content"], "a<｜User｜>b");
}

TEST_F(GenerationFields, RequestIdNamesTheResponse) {
  TestServer s;
  const std::string id = random_word();
  Json c = chat({msg("user", "Hi")});
  c["request_id"] = id;
  EXPECT_EQ(post(s, "/v1/chat/completions", c)["id"], "chatcmpl-" + id);
  EXPECT_EQ(post(s, "/v1/completions", Json{{"prompt", "x"}, {"max_tokens", 1}, {"request_id", id}})["id"],
            "cmpl-" + id);
}

// Whether `done` holds within 20 s.
template <typename Pred>
bool eventually(Pred done) {
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// One request runs at a time; while a first one runs, requests of random priorities queue up: they start
// in priority order (lower first, ties by arrival). Under FCFS a priority other than 0 is refused.
TEST_F(GenerationFields, PriorityOrdersTheQueueUnderThePriorityPolicy) {
  {
    TestServer fcfs;
    int status = 0;
    const Json r = post(fcfs, "/v1/completions", Json{{"prompt", "x"}, {"max_tokens", 1}, {"priority", 2}}, &status);
    EXPECT_EQ(status, 400);
    EXPECT_EQ(r["error"]["param"], "priority");
  }
  TestServerOptions so;
  so.scheduling = SchedulingPolicy::kPriority;
  so.config.max_num_seqs = 1;
  so.step_delay = 5ms;
  TestServer s(so);
  auto first = std::async(std::launch::async, [&] {
    return post(s, "/v1/completions", Json{{"prompt", "first"}, {"max_tokens", 400}});
  });
  ASSERT_TRUE(eventually([&] { return s.engine().stats().running == 1; }));
  std::vector<std::future<Json>> queued;
  std::vector<int64_t> priorities;
  for (int i = 0; i < 5; ++i) {
    const int64_t p = static_cast<int64_t>(rng_() % 7) - 3;
    priorities.push_back(p);
    queued.push_back(std::async(std::launch::async, [&s, p, i] {
      return post(s, "/v1/completions",
                  Json{{"prompt", fmt::format("queued {}", i)}, {"max_tokens", 1}, {"priority", p}});
    }));
    ASSERT_TRUE(eventually([&] { return s.engine().stats().waiting == i + 1; }));  // arrivals in this order
  }
  for (auto& q : queued) EXPECT_TRUE(q.get().contains("choices"));
  EXPECT_TRUE(first.get().contains("choices"));
  // The order the queued ones started in, by their prompts.
  std::map<RequestId, int> index_of;
  for (const auto& r : s.submitted()) {
    const std::string text = tok().decode(r.prompt);
    if (text.rfind("queued ", 0) == 0) index_of[r.id] = std::stoi(text.substr(7));
  }
  std::vector<int> started;
  for (RequestId id : s.started_order())
    if (index_of.count(id)) started.push_back(index_of[id]);
  std::vector<int> want(5);
  std::iota(want.begin(), want.end(), 0);
  std::stable_sort(want.begin(), want.end(), [&](int a, int b) { return priorities[a] < priorities[b]; });
  EXPECT_EQ(started, want);
}

}  // namespace
}  // namespace dsv4::server
