// /v1/responses requests as the chat requests they stand for: input items, instructions, tools, text.format,
// reasoning, and the refusals (each a 400 naming the field).
#include "server/responses_request.h"

#include <gtest/gtest.h>

#include "api_error_of.h"

namespace dsv4::server {
namespace {

Json chat_of(const char* text) { return chat_body_of_responses(Json::parse(text)); }

// The ApiError of a Responses body (status 0 when none).
ApiError error_of(const char* text) {
  return api_error_of([&] { parse_responses_request(Json::parse(text)); });
}

TEST(ResponsesRequest, AStringInputIsAUserTurnAfterTheInstructions) {
  const Json c = chat_of(R"({"model": "m", "instructions": "Be brief.", "input": "Hi", "max_output_tokens": 9,
                             "seed": 4, "temperature": 0.5})");
  EXPECT_EQ(c["messages"], Json::parse(R"([{"role": "system", "content": "Be brief."},
                                           {"role": "user", "content": "Hi"}])"));
  EXPECT_EQ(c["max_tokens"], 9);
  EXPECT_EQ(c["seed"], 4);  // vLLM's extensions pass through
  EXPECT_EQ(c["temperature"], 0.5);
  EXPECT_FALSE(c.contains("instructions"));
  EXPECT_FALSE(c.contains("max_output_tokens"));
}

TEST(ResponsesRequest, ItemsBecomeTurnsToolCallsJoinTheirAssistantTurn) {
  const Json c = chat_of(R"({"input": [
      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"},
                                                      {"type": "input_text", "text": "b"}]},
      {"type": "reasoning", "content": [], "summary": [{"type": "summary_text", "text": "think"}]},
      {"role": "assistant", "content": [{"type": "output_text", "text": "Let me look."}]},
      {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
      {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{\"x\": 1}"},
      {"type": "function_call_output", "call_id": "c1", "output": "one"},
      {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "two"}]},
      {"type": "function_call", "call_id": "c3", "name": "f", "arguments": "{}"}]})");
  const Json want = Json::parse(R"([
      {"role": "user", "content": "ab"},
      {"role": "assistant", "content": "Let me look.", "reasoning_content": "think", "tool_calls": [
          {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
          {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{\"x\": 1}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "one"},
      {"role": "tool", "tool_call_id": "c2", "content": "two"},
      {"role": "assistant", "content": "", "tool_calls": [
          {"id": "c3", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}])");
  EXPECT_EQ(c["messages"], want) << c["messages"].dump(2);
}

TEST(ResponsesRequest, ToolsTextFormatAndReasoningBecomeTheChatFields) {
  const Json c = chat_of(R"({"input": "x",
      "tools": [{"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"},
                 "strict": true}],
      "tool_choice": {"type": "function", "name": "f"},
      "text": {"format": {"type": "json_schema", "name": "s", "schema": {"type": "integer"}, "strict": true}},
      "reasoning": {"effort": "high", "summary": "auto"}})");
  EXPECT_EQ(c["tools"], Json::parse(R"([{"type": "function", "function": {"name": "f", "description": "d",
                                          "parameters": {"type": "object"}, "strict": true}}])"));
  EXPECT_EQ(c["tool_choice"], Json::parse(R"({"type": "function", "function": {"name": "f"}})"));
  EXPECT_EQ(c["response_format"], Json::parse(R"({"type": "json_schema", "json_schema": {"name": "s",
                                                  "schema": {"type": "integer"}, "strict": true}})"));
  EXPECT_EQ(c["reasoning_effort"], "high");
  EXPECT_EQ(chat_of(R"({"input": "x", "reasoning": {"effort": "xhigh"}})")["reasoning_effort"], "max");
  EXPECT_EQ(chat_of(R"({"input": "x", "text": {"format": {"type": "json_object"}}})")["response_format"],
            Json::parse(R"({"type": "json_object"})"));
  EXPECT_FALSE(chat_of(R"({"input": "x", "text": {"format": {"type": "text"}}})").contains("response_format"));
  EXPECT_EQ(chat_of(R"({"input": "x", "tool_choice": "required"})")["tool_choice"], "required");
}

TEST(ResponsesRequest, LogprobsAreAskedByIncludeOrTopLogprobs) {
  const ResponsesRequest a = parse_responses_request(
      Json::parse(R"({"input": "x", "include": ["message.output_text.logprobs"], "top_logprobs": 3})"));
  EXPECT_TRUE(a.chat.logprobs);
  EXPECT_EQ(a.chat.top_logprobs, 3);
  const ResponsesRequest b = parse_responses_request(Json::parse(R"({"input": "x", "top_logprobs": 2})"));
  EXPECT_TRUE(b.chat.logprobs);
  EXPECT_EQ(b.chat.top_logprobs, 2);
  const ResponsesRequest c = parse_responses_request(Json::parse(R"({"input": "x", "include": []})"));
  EXPECT_FALSE(c.chat.logprobs);
}

TEST(ResponsesRequest, TheResponseRepeatsTheRequestsSettings) {
  const ResponsesRequest r = parse_responses_request(Json::parse(R"({"input": "x", "max_output_tokens": 5,
                                                                     "metadata": {"a": "b"}})"));
  EXPECT_EQ(r.echo["max_output_tokens"], 5);
  EXPECT_EQ(r.echo["metadata"], Json::parse(R"({"a": "b"})"));
  EXPECT_EQ(r.echo["tool_choice"], "auto");
  EXPECT_EQ(r.echo["tools"], Json::array());
  EXPECT_EQ(r.chat.options.max_tokens, 5);
}

TEST(ResponsesRequest, RefusalsNameTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"previous_response_id": "resp_1", "input": "x"})", "previous_response_id"},
      {R"({"conversation": "c", "input": "x"})", "conversation"},
      {R"({"background": true, "input": "x"})", "background"},
      {R"({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]})",
       "input[0].content[0].type"},
      {R"({"input": [{"type": "item_reference", "id": "m"}]})", "input[0].type"},
      {R"({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]})", "input[0].call_id"},
      {R"({"input": [{"role": "robot", "content": "x"}]})", "input[0].role"},
      {R"({"input": 3})", "input"},
      {R"({"model": "m"})", "input"},
      {R"({"input": "x", "tools": [{"type": "web_search"}]})", "tools[0].type"},
      {R"({"input": "x", "max_output_tokens": 0})", "max_output_tokens"},
      {R"({"input": "x", "text": {"format": {"type": "yaml"}}})", "text.format.type"},
      {R"({"input": "x", "truncation": "auto"})", "truncation"},
      {R"({"input": "x", "text": {"verbosity": "loud"}})", "text.verbosity"},
      {R"({"input": "x", "n": 2})", "n"},
      {R"({"input": "x", "include": ["file_search_call.results"]})", "include"},
      {R"({"input": "x", "top_logprobs": 21})", "top_logprobs"},
      {R"({"input": "x", "messages": []})", "messages"},
      {R"({"input": "x", "reasoning": {"effort": "extreme"}})", "reasoning.effort"},
  };
  expect_refusals(cases, [](const Json& body) { parse_responses_request(body); });
  EXPECT_EQ(error_of(R"({"input": "x", "store": true, "include": [], "truncation": "disabled"})").status(), 0);
  EXPECT_EQ(error_of(R"({"input": "x", "text": {"verbosity": "low"}, "include": ["reasoning.encrypted_content"],
                        "reasoning": {"effort": "medium", "summary": "auto"}, "parallel_tool_calls": false,
                        "prompt_cache_key": "k", "service_tier": "auto"})")
                .status(),
            0);  // what Codex-style clients send
}

}  // namespace
}  // namespace dsv4::server
