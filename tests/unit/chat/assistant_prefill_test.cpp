// Assistant prefill (continue_final_message, DeepSeek's prefix): the prompt of a chat ending with an open
// assistant turn is the prompt of the chat before it (the official encoding) followed by the turn as the
// model would have written it so far, never closed with end-of-sentence. Fresh random texts each run.
#include "chat/assistant_prefill.h"

#include <gtest/gtest.h>

#include <random>

#include "chat/special_tokens.h"
#include "core/error.h"

namespace dsv4::chat {
namespace {

using ordered_json = nlohmann::ordered_json;

class AssistantPrefill : public ::testing::Test {
 protected:
  void SetUp() override {
    const uint32_t seed = std::random_device{}();
    RecordProperty("seed", std::to_string(seed));
    rng_.seed(seed);
    trace_ = std::make_unique<::testing::ScopedTrace>(__FILE__, __LINE__, "seed " + std::to_string(seed));
  }

  // A few random words (letters, digits, punctuation, a CJK character now and then).
  std::string text() {
    static const std::vector<std::string> pieces = {"alpha", "7", "beta", "x", ",", "Γ", "中", "zz", "?", "q1"};
    std::string s;
    const int n = 1 + static_cast<int>(rng_() % 6);
    for (int i = 0; i < n; ++i) s += (i ? " " : "") + pieces[rng_() % pieces.size()];
    return s;
  }
  ordered_json history() {
    return ordered_json::array({{{"role", "system"}, {"content", text()}}, {{"role", "user"}, {"content", text()}}});
  }
  static ordered_json with(ordered_json messages, ordered_json last) {
    messages.push_back(std::move(last));
    return messages;
  }
  static EncodeOptions mode(ThinkingMode m) {
    EncodeOptions o;
    o.thinking_mode = m;
    return o;
  }

  std::mt19937 rng_;
  std::unique_ptr<::testing::ScopedTrace> trace_;
};

TEST_F(AssistantPrefill, ChatModeContinuesTheContent) {
  const ordered_json h = history();
  const std::string content = text();
  const ChatPrompt p =
      encode_chat_prompt(with(h, {{"role", "assistant"}, {"content", content}}), mode(ThinkingMode::kChat), true);
  // The generation prompt of chat mode (<｜Assistant｜></think>), then the content, open.
  EXPECT_EQ(p.text, encode_messages(h, mode(ThinkingMode::kChat)) + content);
  EXPECT_EQ(p.parse_mode, ThinkingMode::kChat);
}

TEST_F(AssistantPrefill, ThinkingModeContinuesTheContentAfterTheReasoning) {
  const ordered_json h = history();
  const std::string reasoning = text(), content = text();
  const ordered_json turn = {{"role", "assistant"}, {"reasoning_content", reasoning}, {"content", content}};
  const ChatPrompt p = encode_chat_prompt(with(h, turn), mode(ThinkingMode::kThinking), true);
  EXPECT_EQ(p.text, encode_messages(h, mode(ThinkingMode::kThinking)) + reasoning + std::string(kThinkEnd) + content);
  EXPECT_EQ(p.parse_mode, ThinkingMode::kChat);  // the answer has begun: no reasoning to split off
}

TEST_F(AssistantPrefill, ThinkingModeWithoutContentContinuesTheReasoning) {
  const ordered_json h = history();
  const std::string reasoning = text();
  for (const ordered_json& content : {ordered_json(), ordered_json(""), ordered_json::array()}) {
    ordered_json turn = {{"role", "assistant"}, {"reasoning_content", reasoning}};
    if (!content.is_null()) turn["content"] = content;
    const ChatPrompt p = encode_chat_prompt(with(h, turn), mode(ThinkingMode::kThinking), true);
    EXPECT_EQ(p.text, encode_messages(h, mode(ThinkingMode::kThinking)) + reasoning);
    EXPECT_EQ(p.parse_mode, ThinkingMode::kThinking);
  }
  // An empty turn is the plain generation prompt.
  const ChatPrompt empty =
      encode_chat_prompt(with(h, {{"role", "assistant"}, {"content", ""}}), mode(ThinkingMode::kThinking), true);
  EXPECT_EQ(empty.text, encode_messages(h, mode(ThinkingMode::kThinking)));
}

TEST_F(AssistantPrefill, ToolCallsStayOpenToo) {
  const ordered_json h = history();
  const ordered_json turn = {
      {"role", "assistant"},
      {"content", ""},
      {"tool_calls",
       ordered_json::array(
           {{{"type", "function"}, {"function", {{"name", "f"}, {"arguments", "{\"k\": \"" + text() + "\"}"}}}}})}};
  const ChatPrompt p = encode_chat_prompt(with(h, turn), mode(ThinkingMode::kThinking), true);
  const std::string closed = encode_messages(with(h, turn), mode(ThinkingMode::kThinking));
  ASSERT_EQ(closed.substr(closed.size() - kEos.size()), kEos);
  EXPECT_EQ(p.text, closed.substr(0, closed.size() - kEos.size()));
  EXPECT_EQ(p.parse_mode, ThinkingMode::kChat);
}

TEST_F(AssistantPrefill, WithoutContinuingTheLastTurnIsClosed) {
  const ordered_json h = history();
  const ordered_json turn = {{"role", "assistant"}, {"content", text()}};
  const ChatPrompt p = encode_chat_prompt(with(h, turn), mode(ThinkingMode::kChat), false);
  EXPECT_EQ(p.text, encode_messages(with(h, turn), mode(ThinkingMode::kChat)));
  EXPECT_EQ(p.text.substr(p.text.size() - kEos.size()), kEos);
  EXPECT_THROW(encode_chat_prompt(h, mode(ThinkingMode::kChat), true), Error);  // the last turn is the user's
}

TEST_F(AssistantPrefill, NoGenerationPromptEndsWithTheUsersTurn) {
  const ordered_json h = history();
  for (const ThinkingMode m : {ThinkingMode::kChat, ThinkingMode::kThinking}) {
    EncodeOptions o = mode(m);
    const std::string with_prompt = encode_messages(h, o);
    o.add_generation_prompt = false;
    const ChatPrompt p = encode_chat_prompt(h, o, false);
    const std::string gen = std::string(kAssistant) + std::string(m == ThinkingMode::kChat ? kThinkEnd : kThinkStart);
    EXPECT_EQ(p.text + gen, with_prompt);
    EXPECT_EQ(p.parse_mode, ThinkingMode::kChat);
  }
}

}  // namespace
}  // namespace dsv4::chat
