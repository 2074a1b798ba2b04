// The DeepSeek-V4 chat encoding: OpenAI-style messages -> the prompt string. A port of the
// official encoding/encoding_dsv4.py of the V4-Flash release (ECOSYSTEM.md §2.3), sha256
// bdbd57c132a1b3725042323d02b98b9d1df28e5f388f134399555d041f5055e0, that reproduces its output
// byte for byte (shared/golden/encoding; tests/unit/chat/data has random cases it encoded).
//
// Messages are {"role": system|developer|user|assistant|tool|latest_reminder, ...} with the
// official fields: content, reasoning_content, tools, response_format, tool_calls, tool_call_id,
// task, wo_eos. Where the official encoder would crash or print a Python repr on odd input, this
// port throws dsv4::Error naming the field (chat/message_check.h), and it also accepts:
//   - content given as a list of {"type": "text", "text": ...} parts (joined by "\n\n");
//   - tool-call `arguments` given as a JSON object rather than a JSON string;
//   - null content on user and tool messages (rendered as "", the official fails or prints "None").
// Python-only divergence: integers beyond 64 bits in tool schemas or arguments are written as
// floats (nlohmann), and NaN/Infinity inside an arguments string make it "unparsable".
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace dsv4::chat {

enum class ThinkingMode { kChat, kThinking };

// The official encoder accepts None, "high" and "max"; None and "high" render identically.
enum class ReasoningEffort { kNone, kHigh, kMax };

struct EncodeOptions {
  ThinkingMode thinking_mode = ThinkingMode::kThinking;
  ReasoningEffort reasoning_effort = ReasoningEffort::kNone;
  // Drop reasoning_content of assistants before the last user message (and earlier developer
  // messages). Forced off when any message carries tools, as in the official encoder.
  bool drop_thinking = true;
  bool add_default_bos_token = true;  // only when there is no context
  // The generation prompt (<｜Assistant｜> and the thinking token) after a final user or developer
  // message. Not an option of the official encoder, which always adds it: false is Hugging Face's
  // add_generation_prompt=False (the prompt ends with the user's turn).
  bool add_generation_prompt = true;
  // Messages already encoded earlier (a prefix): they shape the rendering but are not rendered.
  nlohmann::ordered_json context = nlohmann::ordered_json::array();
};

// The prompt for `messages` (a JSON array). Throws dsv4::Error on malformed messages.
std::string encode_messages(const nlohmann::ordered_json& messages, const EncodeOptions& options = {});

// "chat" | "thinking".
ThinkingMode parse_thinking_mode(std::string_view s);
std::string_view to_string(ThinkingMode m);
// null | "high" | "max".
ReasoningEffort parse_reasoning_effort(const nlohmann::ordered_json& v);

}  // namespace dsv4::chat
