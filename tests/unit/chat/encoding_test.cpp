// Encoder behaviour beyond the golden files, and the errors malformed messages raise.
#include "chat/encoding.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "chat/special_tokens.h"
#include "core/error.h"
#include "testing/error_of.h"

namespace dsv4::chat {
namespace {

using ordered_json = nlohmann::ordered_json;

std::string cat(std::initializer_list<std::string_view> parts) {
  std::string s;
  for (auto p : parts) s += p;
  return s;
}

using ::dsv4::testing::error_of;

std::string random_text(std::mt19937& rng) {
  static const char* pieces[] = {"a", "b", " ", "\n", "中", "😀", "\"", "\\", "<", ">", "{", "x1"};
  std::string s;
  const int n = std::uniform_int_distribution<int>(1, 10)(rng);
  for (int i = 0; i < n; ++i) s += pieces[rng() % std::size(pieces)];
  return s;
}

EncodeOptions opts(ThinkingMode mode, bool drop = true) {
  EncodeOptions o;
  o.thinking_mode = mode;
  o.drop_thinking = drop;
  return o;
}

TEST(Encoding, ChatSingleTurn) {
  const auto msgs = ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
  EXPECT_EQ(encode_messages(msgs, opts(ThinkingMode::kChat)), cat({kBos, kUser, "hi", kAssistant, kThinkEnd}));
  EXPECT_EQ(encode_messages(msgs, opts(ThinkingMode::kThinking)), cat({kBos, kUser, "hi", kAssistant, kThinkStart}));
}

TEST(Encoding, DropThinkingOffKeepsEarlierReasoning) {
  const auto msgs = ordered_json::parse(R"([
    {"role": "user", "content": "q1"},
    {"role": "assistant", "reasoning_content": "r1", "content": "a1"},
    {"role": "user", "content": "q2"}])");
  EXPECT_EQ(encode_messages(msgs, opts(ThinkingMode::kThinking, /*drop=*/false)),
            cat({kBos, kUser, "q1", kAssistant, kThinkStart, "r1", kThinkEnd, "a1", kEos, kUser, "q2", kAssistant,
                 kThinkStart}));
  EXPECT_EQ(encode_messages(msgs, opts(ThinkingMode::kThinking, /*drop=*/true)),
            cat({kBos, kUser, "q1", kAssistant, kThinkEnd, "a1", kEos, kUser, "q2", kAssistant, kThinkStart}));
}

TEST(Encoding, ToolsTurnDropThinkingOff) {
  auto msgs = ordered_json::parse(R"([
    {"role": "system", "content": "s", "tools": [{"type": "function", "function": {"name": "f"}}]},
    {"role": "user", "content": "q1"},
    {"role": "assistant", "reasoning_content": "r1", "content": "a1"},
    {"role": "user", "content": "q2"}])");
  const std::string prompt = encode_messages(msgs, opts(ThinkingMode::kThinking));
  EXPECT_NE(prompt.find(cat({kAssistant, kThinkStart, "r1", kThinkEnd, "a1"})), std::string::npos);
  EXPECT_NE(prompt.find(R"({"name": "f"})"), std::string::npos);
  msgs[0]["tools"] = ordered_json::array();  // empty tools: dropping applies again
  EXPECT_EQ(encode_messages(msgs, opts(ThinkingMode::kThinking)).find("r1"), std::string::npos);
}

// Tool results come back in any order; the prompt lists them in the order of the calls.
TEST(Encoding, ToolResultsFollowCallOrder) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 4);
    ordered_json calls = ordered_json::array();
    std::vector<std::string> results;
    for (int i = 0; i < n; ++i) {
      calls.push_back({{"id", fmt::format("id{}", i)},
                       {"type", "function"},
                       {"function", {{"name", "f"}, {"arguments", fmt::format(R"({{"i": {}}})", i)}}}});
      results.push_back(fmt::format("r{}:{}", i, random_text(rng)));
    }
    std::vector<int> perm(static_cast<size_t>(n));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    ordered_json msgs = ordered_json::array(
        {{{"role", "user"}, {"content", "q"}}, {{"role", "assistant"}, {"content", ""}, {"tool_calls", calls}}});
    for (int i : perm) {
      msgs.push_back({{"role", "tool"}, {"tool_call_id", fmt::format("id{}", i)}, {"content", results[size_t(i)]}});
    }
    std::string want;
    for (int i = 0; i < n; ++i)
      want += (i ? "\n\n<tool_result>" : "<tool_result>") + results[size_t(i)] + "</tool_result>";
    const std::string prompt = encode_messages(msgs, opts(ThinkingMode::kChat));
    EXPECT_NE(prompt.find(cat({kUser, want, kAssistant})), std::string::npos) << prompt;
  }
}

TEST(Encoding, ReasoningEffort) {
  const auto msgs = ordered_json::parse(R"([{"role": "system", "content": "s"}, {"role": "user", "content": "q"}])");
  EncodeOptions o = opts(ThinkingMode::kThinking);
  const std::string none = encode_messages(msgs, o);
  o.reasoning_effort = ReasoningEffort::kHigh;
  EXPECT_EQ(encode_messages(msgs, o), none);
  o.reasoning_effort = ReasoningEffort::kMax;
  const std::string max = encode_messages(msgs, o);
  ASSERT_TRUE(max.starts_with(cat({kBos, "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"})));
  EXPECT_TRUE(max.ends_with(none.substr(kBos.size())));
  o.thinking_mode = ThinkingMode::kChat;  // chat mode ignores the effort
  EXPECT_EQ(encode_messages(msgs, o).find("Reasoning Effort"), std::string::npos);
}

TEST(Encoding, ResponseFormatAndTasks) {
  const auto msgs = ordered_json::parse(R"([
    {"role": "system", "content": "s", "response_format": {"type": "json_object", "x": 1.0}},
    {"role": "user", "content": "q", "task": "query"}])");
  EXPECT_EQ(encode_messages(msgs, opts(ThinkingMode::kChat)),
            cat({kBos, "s\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n",
                 R"({"type": "json_object", "x": 1.0})", kUser, "q<｜query｜>"}));
  const auto action = ordered_json::parse(R"([{"role": "user", "content": "q", "task": "action"}])");
  EXPECT_EQ(encode_messages(action, opts(ThinkingMode::kThinking)),
            cat({kBos, kUser, "q", kAssistant, kThinkStart, "<｜action｜>"}));
}

TEST(Encoding, ArgumentsForms) {
  auto call = [](const ordered_json& arguments) {
    ordered_json msgs = ordered_json::array(
        {{{"role", "user"}, {"content", "q"}},
         {{"role", "assistant"}, {"tool_calls", {{{"function", {{"name", "f"}, {"arguments", arguments}}}}}}}});
    return encode_messages(msgs, opts(ThinkingMode::kChat));
  };
  const std::string from_string = call(R"({"a": "x", "b": [1, 2.50], "c": {"d": null}})");
  EXPECT_NE(from_string.find("<｜DSML｜parameter name=\"a\" string=\"true\">x</｜DSML｜parameter>\n"
                             "<｜DSML｜parameter name=\"b\" string=\"false\">[1, 2.5]</｜DSML｜parameter>\n"
                             "<｜DSML｜parameter name=\"c\" string=\"false\">{\"d\": null}</｜DSML｜parameter>"),
            std::string::npos)
      << from_string;
  EXPECT_EQ(call(ordered_json::parse(R"({"a": "x", "b": [1, 2.50], "c": {"d": null}})")), from_string);
  // Not JSON: one string parameter named "arguments", as the official encoder does.
  EXPECT_NE(call("not json{").find("<｜DSML｜parameter name=\"arguments\" string=\"true\">not json{</"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { call("[1, 2]"); }), "tool call arguments must encode a JSON object, got array: [1, 2]");
}

TEST(Encoding, ContentPartsAndWoEos) {
  const auto parts = ordered_json::parse(R"([{"role": "user", "content": [{"type": "text", "text": "a"},
    {"type": "text", "text": "b"}]}, {"role": "assistant", "content": "c", "wo_eos": true}])");
  EXPECT_EQ(encode_messages(parts, opts(ThinkingMode::kChat)),
            cat({kBos, kUser, "a\n\nb", kAssistant, kThinkEnd, "c"}));
}

// With a context that ends on an assistant turn, encoding continues exactly where it stopped.
TEST(Encoding, ContextContinuesThePrompt) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 20; ++trial) {
    ordered_json all = ordered_json::array({{{"role", "system"}, {"content", random_text(rng)}}});
    const int turns = 2 + static_cast<int>(rng() % 3);
    for (int t = 0; t < turns; ++t) {
      all.push_back({{"role", "user"}, {"content", random_text(rng)}});
      all.push_back({{"role", "assistant"}, {"content", random_text(rng)}});
    }
    const size_t split = 1 + 2 * (1 + rng() % static_cast<unsigned>(turns - 1));
    ordered_json context(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(split));
    ordered_json rest(all.begin() + static_cast<std::ptrdiff_t>(split), all.end());
    EncodeOptions o = opts(ThinkingMode::kChat);
    const std::string whole = encode_messages(all, o);
    const std::string head = encode_messages(context, o);
    o.context = context;
    EXPECT_EQ(head + encode_messages(rest, o), whole);
  }
}

TEST(Encoding, MalformedMessages) {
  auto err = [](std::string_view json) {
    return error_of([&] { encode_messages(ordered_json::parse(json), opts(ThinkingMode::kChat)); });
  };
  EXPECT_EQ(err(R"({"role": "user"})"), "messages must be a JSON array of messages, got object");
  EXPECT_EQ(err(R"([3])"), "messages[0] must be an object, got number");
  EXPECT_EQ(err(R"([{"role": "user", "content": "a"}, {"content": "b"}])"), "messages[1]: missing \"role\"");
  EXPECT_EQ(err(R"([{"role": 1}])"), "messages[0].role must be a string, got number");
  EXPECT_EQ(err(R"([{"role": "bot"}])"),
            "messages[0].role: unknown role \"bot\" (expected system, developer, user, assistant, tool or "
            "latest_reminder)");
  EXPECT_EQ(err(R"([{"role": "user", "content": 5}])"), "messages[0].content must be a string, got number");
  EXPECT_EQ(err(R"([{"role": "user", "content": [{"type": "image_url"}]}])"),
            "messages[0].content[0].type: only \"text\" content parts are supported, got \"image_url\"");
  EXPECT_EQ(err(R"([{"role": "developer", "content": ""}])"),
            "messages[0].content: a developer message needs non-empty content");
  EXPECT_EQ(err(R"([{"role": "latest_reminder"}])"), "messages[0].content: a latest_reminder message needs content");
  EXPECT_EQ(err(R"([{"role": "assistant", "reasoning_content": []}])"),
            "messages[0].reasoning_content must be a string, got array");
  EXPECT_EQ(err(R"([{"role": "system", "tools": {}}])"), "messages[0].tools must be an array, got object");
  EXPECT_EQ(err(R"([{"role": "system", "tools": [{"name": "f"}]}])"),
            "messages[0].tools[0].function must be an object (tools use the OpenAI format {\"type\": \"function\", "
            "\"function\": {...}})");
  EXPECT_EQ(err(R"([{"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}])"),
            "messages[0].tool_calls[0].function.name must be a string");
  EXPECT_EQ(err(R"([{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": 3}}]}])"),
            "messages[0].tool_calls[0].function.arguments must be a JSON string (or an object), got number");
  EXPECT_EQ(err(R"([{"role": "tool", "content": "x", "tool_call_id": 7}])"),
            "messages[0].tool_call_id must be a string, got number");
  EXPECT_EQ(err(R"([{"role": "user", "content": "x", "task": "sing"}])"),
            "messages[0].task: invalid task \"sing\" (expected action, query, authority, domain, title or read_url)");
  EXPECT_EQ(err(R"([{"role": "assistant", "wo_eos": 1}])"), "messages[0].wo_eos must be a boolean, got number");

  EncodeOptions o;
  o.context = ordered_json::parse(R"([{"content": "x"}])");
  EXPECT_EQ(error_of([&] { encode_messages(ordered_json::array(), o); }), "context[0]: missing \"role\"");
}

TEST(Encoding, ParseOptionStrings) {
  EXPECT_EQ(parse_thinking_mode("chat"), ThinkingMode::kChat);
  EXPECT_EQ(parse_thinking_mode("thinking"), ThinkingMode::kThinking);
  EXPECT_EQ(error_of([] { parse_thinking_mode("think"); }),
            "thinking_mode must be \"chat\" or \"thinking\", got \"think\"");
  EXPECT_EQ(parse_reasoning_effort(nullptr), ReasoningEffort::kNone);
  EXPECT_EQ(parse_reasoning_effort("max"), ReasoningEffort::kMax);
  EXPECT_EQ(error_of([] { parse_reasoning_effort("low"); }),
            "reasoning_effort must be null, \"high\" or \"max\", got \"low\"");
}

}  // namespace
}  // namespace dsv4::chat
