// Request parsing: typed fields, the shared generation options, /v1/completions prompts, /v1/chat/completions
// thinking, tools and refusals. Each error is a 400 naming the field.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "api_error_of.h"
#include "server/api_error.h"
#include "server/chat_request.h"
#include "server/completion_request.h"

namespace dsv4::server {
namespace {

Json body(const char* text) { return Json::parse(text); }

template <typename F>
ApiError error_of(F&& f) {
  return api_error_of(std::forward<F>(f));
}

TEST(RequestBody, MalformedAndNonObjectBodiesAre400) {
  EXPECT_EQ(error_of([] { parse_request_body("{\"a\": "); }).status(), 400);
  EXPECT_EQ(error_of([] { parse_request_body(""); }).status(), 400);
  const ApiError e = error_of([] { parse_request_body("[1, 2]"); });
  EXPECT_EQ(e.status(), 400);
  EXPECT_EQ(e.type(), "invalid_request_error");
  EXPECT_NE(std::string(e.what()).find("must be a JSON object"), std::string::npos);
  EXPECT_TRUE(parse_request_body(R"({"a": 1})").is_object());
  const std::string deep = "{\"a\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_NE(std::string(error_of([&] { parse_request_body(deep); }).what()).find("nests deeper"), std::string::npos);
}

TEST(RequestFields, TypesNullsAndIntegralFloats) {
  const Json j = body(R"({"t": 0.5, "n": 2.0, "s": "x", "b": true, "z": null, "bad": "hot"})");
  const RequestFields f(j);
  EXPECT_EQ(f.number("t"), 0.5);
  EXPECT_EQ(f.integer("n"), 2);
  EXPECT_EQ(f.string("s"), "x");
  EXPECT_EQ(f.boolean("b"), true);
  EXPECT_FALSE(f.number("z").has_value());
  EXPECT_FALSE(f.number("absent").has_value());
  const ApiError e = error_of([&] { f.number("bad"); });
  EXPECT_EQ(e.status(), 400);
  EXPECT_EQ(e.param(), "bad");
  EXPECT_EQ(std::string(e.what()), "'bad' must be a number, got \"hot\"");
  EXPECT_EQ(error_of([&] { f.integer("t"); }).status(), 400);  // 0.5 is not an integer
}

TEST(GenerationOptions, ParsesEveryField) {
  const Json j = body(R"({"model": "m", "temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": 7,
    "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1, "logit_bias": {"42": -100},
    "ignore_eos": true, "min_tokens": 2, "stop_token_ids": [5, 6], "max_tokens": 9, "stop": ["a", "bc"],
    "include_stop_str_in_output": true, "n": 3, "stream": true, "stream_options": {"include_usage": true}})");
  const GenerationOptions o = parse_generation_options(RequestFields(j), {"max_tokens"});
  EXPECT_EQ(o.model, "m");
  EXPECT_EQ(o.n, 3);
  EXPECT_TRUE(o.stream && o.include_usage);
  EXPECT_EQ(o.stop, (std::vector<std::string>{"a", "bc"}));
  const SamplingParams p = o.sampling({}, 9, 2);
  EXPECT_DOUBLE_EQ(p.temperature, 0.7);
  EXPECT_DOUBLE_EQ(p.top_p, 0.9);
  EXPECT_EQ(p.top_k, 40);
  EXPECT_DOUBLE_EQ(p.min_p, 0.05);
  EXPECT_EQ(p.seed, 9u);  // seed + choice index, as vLLM's n > 1
  EXPECT_DOUBLE_EQ(p.repetition_penalty, 1.1);
  EXPECT_EQ(p.logit_bias.at(42), -100.0f);
  EXPECT_TRUE(p.ignore_eos);
  EXPECT_EQ(p.min_tokens, 2);
  EXPECT_EQ(p.stop_token_ids, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(p.max_tokens, 9);
}

TEST(GenerationOptions, DefaultsComeFromGenerationConfigThenTheEngine) {
  const Json j = body(R"({"top_p": 0.5})");
  const GenerationOptions o = parse_generation_options(RequestFields(j), {"max_tokens"});
  SamplingDefaults d;
  d.temperature = 0.6;
  d.top_p = 0.95;
  const SamplingParams p = o.sampling(d, 16, 0);
  EXPECT_DOUBLE_EQ(p.temperature, 0.6);  // from generation_config.json
  EXPECT_DOUBLE_EQ(p.top_p, 0.5);        // the request wins
  EXPECT_EQ(p.top_k, SamplingParams{}.top_k);
  EXPECT_FALSE(o.max_tokens.has_value());
}

TEST(GenerationOptions, ChatPrefersMaxCompletionTokens) {
  const Json j = body(R"({"max_tokens": 5, "max_completion_tokens": 7})");
  EXPECT_EQ(parse_generation_options(RequestFields(j), {"max_completion_tokens", "max_tokens"}).max_tokens, 7);
}

TEST(GenerationOptions, BadValuesAre400NamingTheField) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {R"({"temperature": "hot"})", "temperature"},
      {R"({"temperature": -1})", "temperature"},
      {R"({"top_p": 0})", "top_p"},
      {R"({"top_k": -2})", "top_k"},
      {R"({"max_tokens": 0})", "max_tokens"},
      {R"({"max_tokens": 1.5})", "max_tokens"},
      {R"({"n": 0})", "n"},
      {R"({"stop": [1]})", "stop"},
      {R"({"stop": ""})", "stop"},
      {R"({"logit_bias": {"x": 1}})", "logit_bias"},
      {R"({"logit_bias": {"5": 500}})", "logit_bias"},
      {R"({"stop_token_ids": [-1]})", "stop_token_ids"},
      {R"({"stream_options": {"include_usage": true}})", "stream_options"},
      {R"({"stream": true, "stream_options": {"include_usage": 1}})", "stream_options.include_usage"},
      {R"({"presence_penalty": 3})", "presence_penalty"},
      {R"({"seed": "x"})", "seed"},
  };
  for (const auto& [text, param] : cases) {
    const Json j = body(text);
    const ApiError e = error_of([&] { parse_generation_options(RequestFields(j), {"max_tokens"}); });
    EXPECT_EQ(e.status(), 400) << text;
    EXPECT_EQ(e.param(), param) << text;
  }
}

TEST(GenerationOptions, UnimplementedFieldsAreRefusedNotIgnored) {
  for (const char* text : {R"({"use_beam_search": true})", R"({"best_of": 3})", R"({"logprob_token_ids": [1]})"}) {
    const Json j = body(text);
    const ApiError e = error_of([&] { refuse_unsupported(RequestFields(j), Endpoint::kCompletions); });
    EXPECT_EQ(e.status(), 400) << text;
    EXPECT_NE(std::string(e.what()).find("not supported"), std::string::npos) << text;
  }
  const Json text_format = body(R"({"response_format": {"type": "text"}, "best_of": 1})");
  EXPECT_EQ(error_of([&] { refuse_unsupported(RequestFields(text_format), Endpoint::kChat); }).status(), 0);
}

TEST(CompletionRequest, PromptShapes) {
  EXPECT_EQ(*parse_completion_request(body(R"({"prompt": "hi"})")).prompts.at(0).text, "hi");
  const auto ids = parse_completion_request(body(R"({"prompt": [1, 2, 3]})"));
  ASSERT_EQ(ids.prompts.size(), 1u);
  EXPECT_EQ(ids.prompts[0].ids, (std::vector<int32_t>{1, 2, 3}));
  const auto many = parse_completion_request(body(R"({"prompt": ["a", [4, 5]], "logprobs": 2})"));
  ASSERT_EQ(many.prompts.size(), 2u);
  EXPECT_EQ(*many.prompts[0].text, "a");
  EXPECT_EQ(many.prompts[1].ids, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(many.options.logprobs, 2);
}

TEST(CompletionRequest, RefusalsAndErrors) {
  EXPECT_EQ(error_of([] { parse_completion_request(body(R"({})")); }).param(), "prompt");
  EXPECT_EQ(error_of([] { parse_completion_request(body(R"({"prompt": 5})")); }).param(), "prompt");
  EXPECT_EQ(error_of([] { parse_completion_request(body(R"({"prompt": [1, -2]})")); }).param(), "prompt");
  EXPECT_EQ(error_of([] { parse_completion_request(body(R"({"prompt": "x", "logprobs": 21})")); }).param(), "logprobs");
  // echo: the prompt repeated; with logprobs its tokens scored (prompt_logprobs at least as wide), which a
  // stream cannot carry; prompt_logprobs alone is not streamed either (vLLM's rule).
  const auto echo = parse_completion_request(body(R"({"prompt": "x", "echo": true, "logprobs": 2})"));
  EXPECT_TRUE(echo.echo);
  EXPECT_EQ(echo.options.prompt_logprobs, 2);
  EXPECT_EQ(echo.show_prompt_logprobs, -1);
  EXPECT_EQ(parse_completion_request(body(R"({"prompt": "x", "echo": true})")).options.prompt_logprobs, -1);
  EXPECT_EQ(error_of([] {
              parse_completion_request(body(R"({"prompt": "x", "echo": true, "logprobs": 0, "stream": true})"));
            }).param(),
            "echo");
  EXPECT_EQ(error_of([] {
              parse_completion_request(body(R"({"prompt": "x", "prompt_logprobs": 1, "stream": true})"));
            }).param(),
            "prompt_logprobs");
  EXPECT_EQ(error_of([] { parse_completion_request(body(R"({"prompt": "x", "suffix": "y"})")); }).param(), "suffix");
  EXPECT_EQ(error_of([] { parse_completion_request(body(R"({"prompt": "x", "echo": false})")); }).status(), 0);
}

TEST(ChatRequest, ThinkingIsOffUnlessAsked) {
  const auto mode = [](const char* text) { return parse_chat_request(Json::parse(text)).encode; };
  const char* msgs = R"("messages": [{"role": "user", "content": "hi"}])";
  const auto with = [&](const std::string& extra) { return fmt::format("{{{}{}}}", msgs, extra); };
  EXPECT_EQ(mode(with("").c_str()).thinking_mode, chat::ThinkingMode::kChat);
  EXPECT_EQ(mode(with(R"(, "chat_template_kwargs": {"thinking": true})").c_str()).thinking_mode,
            chat::ThinkingMode::kThinking);
  EXPECT_EQ(mode(with(R"(, "chat_template_kwargs": {"enable_thinking": true})").c_str()).thinking_mode,
            chat::ThinkingMode::kThinking);
  EXPECT_EQ(mode(with(R"(, "thinking": {"type": "enabled"})").c_str()).thinking_mode, chat::ThinkingMode::kThinking);
  EXPECT_EQ(mode(with(R"(, "reasoning_effort": "none")").c_str()).thinking_mode, chat::ThinkingMode::kChat);
  const auto high = mode(with(R"(, "reasoning_effort": "high")").c_str());
  EXPECT_EQ(high.thinking_mode, chat::ThinkingMode::kThinking);
  EXPECT_EQ(high.reasoning_effort, chat::ReasoningEffort::kHigh);
  EXPECT_EQ(mode(with(R"(, "reasoning_effort": "max")").c_str()).reasoning_effort, chat::ReasoningEffort::kMax);
  const auto low = mode(with(R"(, "reasoning_effort": "low")").c_str());
  EXPECT_EQ(low.thinking_mode, chat::ThinkingMode::kThinking);
  EXPECT_EQ(low.reasoning_effort, chat::ReasoningEffort::kNone);
  // An explicit switch wins over the effort.
  EXPECT_EQ(
      mode(with(R"(, "reasoning_effort": "max", "chat_template_kwargs": {"thinking": false})").c_str()).thinking_mode,
      chat::ThinkingMode::kChat);
  EXPECT_EQ(error_of([&] { parse_chat_request(Json::parse(with(R"(, "reasoning_effort": "ultra")"))); }).param(),
            "reasoning_effort");
}

TEST(ChatRequest, ToolsGoOnTheSystemMessage) {
  const char* tools = R"("tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}])";
  const auto with_system = parse_chat_request(Json::parse(fmt::format(
      R"({{"messages": [{{"role": "system", "content": "S"}}, {{"role": "user", "content": "U"}}], {}}})", tools)));
  ASSERT_EQ(with_system.messages.size(), 2u);
  EXPECT_EQ(with_system.messages[0]["tools"][0]["function"]["name"], "get_weather");
  const auto user_only = [&](const char* extra) {
    return Json::parse(fmt::format(R"({{"messages": [{{"role": "user", "content": "U"}}], {}{}}})", tools, extra));
  };
  const auto without = parse_chat_request(user_only(""));
  ASSERT_EQ(without.messages.size(), 2u);
  EXPECT_EQ(without.messages[0]["role"], "system");
  EXPECT_EQ(without.messages[0]["content"], "");
  EXPECT_TRUE(without.messages[0].contains("tools"));
  const auto none = parse_chat_request(user_only(R"(, "tool_choice": "none")"));
  EXPECT_EQ(none.messages.size(), 1u);
  const auto required = parse_chat_request(user_only(R"(, "tool_choice": "required")"));
  EXPECT_EQ(required.tool_choice.mode, ToolChoice::Mode::kRequired);
  EXPECT_TRUE(required.messages[0].contains("tools"));  // the tools stay in the prompt
  EXPECT_EQ(error_of([&] { parse_chat_request(user_only(R"(, "tool_choice": "sometimes")")); }).param(), "tool_choice");
  EXPECT_EQ(
      error_of([] { parse_chat_request(Json::parse(R"({"messages": [], "tools": [{"type": "function"}]})")); }).param(),
      "messages");
  EXPECT_EQ(error_of([] {
              parse_chat_request(Json::parse(R"({"messages": [{"role": "user", "content": "U"}], "tools": [{"type":
              "function", "function": {}}]})"));
            }).param(),
            "tools[0]");
}

TEST(ChatRequest, ReasoningIsAcceptedAsReasoningContentAndLogprobsChecked) {
  const auto r = parse_chat_request(Json::parse(R"({"messages": [{"role": "user", "content": "U"},
      {"role": "assistant", "content": "A", "reasoning": "R"}, {"role": "user", "content": "V"}],
      "logprobs": true, "top_logprobs": 3})"));
  EXPECT_EQ(r.messages[1]["reasoning_content"], "R");
  EXPECT_FALSE(r.messages[1].contains("reasoning"));
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.options.logprobs, 3);
  EXPECT_EQ(error_of([] {
              parse_chat_request(Json::parse(R"({"messages": [{"role": "user", "content": "U"}], "top_logprobs": 2})"));
            }).param(),
            "top_logprobs");
  EXPECT_EQ(error_of([] { parse_chat_request(Json::parse(R"({"messages": "hi"})")); }).param(), "messages");
  EXPECT_EQ(error_of([] {
              parse_chat_request(Json::parse(R"({"messages": [{"role": "user", "content": "U"}], "functions": []})"));
            }).status(),
            400);
}

}  // namespace
}  // namespace dsv4::server
