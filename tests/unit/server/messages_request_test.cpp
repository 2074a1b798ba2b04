// /v1/messages requests as the chat requests they stand for: system, content blocks, tools, tool_choice,
// thinking, stop sequences, and the refusals (each a 400 naming the field).
#include "server/messages_request.h"

#include <gtest/gtest.h>

#include "api_error_of.h"

namespace dsv4::server {
namespace {

Json chat_of(const char* text) { return chat_body_of_messages(Json::parse(text)); }

TEST(MessagesRequest, BlocksBecomeTurnsToolResultsBeforeTheUsersText) {
  const Json c = chat_of(R"({"max_tokens": 5, "seed": 2,
      "system": [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}],
      "messages": [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": [
          {"type": "thinking", "thinking": "look it up", "signature": "s"},
          {"type": "text", "text": "Checking."},
          {"type": "tool_use", "id": "t1", "name": "w", "input": {"city": "Oslo"}},
          {"type": "tool_use", "id": "t2", "name": "w", "input": {}}]},
        {"role": "user", "content": [
          {"type": "tool_result", "tool_use_id": "t1", "content": "cold"},
          {"type": "tool_result", "tool_use_id": "t2", "content": [{"type": "text", "text": "?"}]},
          {"type": "text", "text": "So?"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t3", "name": "w", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t3"}]}]})");
  const Json want = Json::parse(R"([
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": "Checking.", "reasoning_content": "look it up", "tool_calls": [
          {"id": "t1", "type": "function", "function": {"name": "w", "arguments": "{\"city\":\"Oslo\"}"}},
          {"id": "t2", "type": "function", "function": {"name": "w", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "t1", "content": "cold"},
      {"role": "tool", "tool_call_id": "t2", "content": "?"},
      {"role": "user", "content": "So?"},
      {"role": "assistant", "content": "", "tool_calls": [
          {"id": "t3", "type": "function", "function": {"name": "w", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "t3", "content": ""}])");
  EXPECT_EQ(c["messages"], want) << c["messages"].dump(2);
  EXPECT_EQ(c["max_tokens"], 5);
  EXPECT_EQ(c["seed"], 2);  // passes through
}

TEST(MessagesRequest, ToolsChoiceThinkingStopAndUser) {
  const Json c = chat_of(R"({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
      "tools": [{"name": "w", "description": "d", "input_schema": {"type": "object"}}],
      "tool_choice": {"type": "tool", "name": "w", "disable_parallel_tool_use": true},
      "thinking": {"type": "enabled", "budget_tokens": 2048},
      "stop_sequences": ["END"], "metadata": {"user_id": "u1"}})");
  EXPECT_EQ(c["tools"], Json::parse(R"([{"type": "function", "function": {"name": "w", "description": "d",
                                          "parameters": {"type": "object"}}}])"));
  EXPECT_EQ(c["tool_choice"], Json::parse(R"({"type": "function", "function": {"name": "w"}})"));
  EXPECT_EQ(c["parallel_tool_calls"], false);
  EXPECT_EQ(c["thinking"], Json::parse(R"({"type": "enabled", "budget_tokens": 2048})"));
  EXPECT_EQ(c["stop"], Json::parse(R"(["END"])"));
  EXPECT_EQ(c["user"], "u1");
  const char* any = R"({"max_tokens": 1, "messages": [], "tool_choice": {"type": "any"}})";
  EXPECT_EQ(chat_of(any)["tool_choice"], "required");
  const ChatRequest r = parse_messages_request(Json::parse(R"({"max_tokens": 3, "messages": [
      {"role": "user", "content": "x"}], "thinking": {"type": "enabled"}})"));
  EXPECT_EQ(r.encode.thinking_mode, chat::ThinkingMode::kThinking);
  EXPECT_EQ(r.thinking_budget, -1);
  EXPECT_EQ(r.options.max_tokens, 3);
  EXPECT_EQ(parse_messages_request(
                Json::parse(
                    R"({"max_tokens": 3, "messages": [{"role": "user", "content": "x"}], "thinking": {"type": "enabled",
                                                  "budget_tokens": 7}})"))
                .thinking_budget,
            7);
}

TEST(MessagesRequest, RefusalsNameTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"messages": [{"role": "user", "content": "x"}]})", "max_tokens"},
      {R"({"max_tokens": 0, "messages": []})", "max_tokens"},
      {R"({"max_tokens": 1})", "messages"},
      {R"({"max_tokens": 1, "messages": [{"role": "system", "content": "x"}]})", "messages[0].role"},
      {R"({"max_tokens": 1, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]})",
       "messages[0].content[0].type"},
      {R"({"max_tokens": 1, "messages": [{"role": "user", "content": [{"type": "tool_use", "id": "a",
          "name": "b", "input": {}}]}]})",
       "messages[0].content[0].type"},
      {R"({"max_tokens": 1, "messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "a",
          "name": "b", "input": "x"}]}]})",
       "messages[0].content[0].input"},
      {R"({"max_tokens": 1, "messages": [], "tools": [{"type": "bash_20250124", "name": "bash"}]})", "tools[0].type"},
      {R"({"max_tokens": 1, "messages": [], "tool_choice": {"type": "some"}})", "tool_choice.type"},
      {R"({"max_tokens": 1, "messages": [], "thinking": {"type": "on"}})", "thinking.type"},
      {R"({"max_tokens": 1, "messages": [], "mcp_servers": [{"url": "u"}]})", "mcp_servers"},
      {R"({"max_tokens": 1, "messages": [], "stop": ["x"]})", "stop"},
      {R"({"max_tokens": 1, "messages": [], "system": [{"type": "image"}]})", "system[0].type"},
  };
  expect_refusals(cases, [](const Json& body) { parse_messages_request(body); });
}

}  // namespace
}  // namespace dsv4::server
