#include "chat/assistant_prefill.h"

#include "chat/special_tokens.h"
#include "core/error.h"

namespace dsv4::chat {
namespace {

using ordered_json = nlohmann::ordered_json;

// No text yet: absent, null, "", or text parts that are all empty.
bool no_text(const ordered_json& msg) {
  const auto it = msg.find("content");
  if (it == msg.end() || it->is_null()) return true;
  if (it->is_string()) return it->get_ref<const std::string&>().empty();
  if (!it->is_array()) return false;  // the encoder's check names it
  for (const ordered_json& part : *it) {
    if (!part.is_object() || !part.contains("text") || !part["text"].is_string() || !part["text"].empty()) return false;
  }
  return true;
}

bool has_tool_calls(const ordered_json& msg) {
  const auto it = msg.find("tool_calls");
  return it != msg.end() && !it->is_null() && !(it->is_array() && it->empty());
}

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

ChatPrompt encode_chat_prompt(ordered_json messages, const EncodeOptions& options, bool continue_final) {
  if (!continue_final) {
    const ThinkingMode mode = options.add_generation_prompt ? options.thinking_mode : ThinkingMode::kChat;
    return {encode_messages(messages, options), mode};
  }
  DSV4_CHECK(messages.is_array() && !messages.empty() && messages.back().is_object() &&
                 messages.back().value("role", ordered_json()) == "assistant",
             "the last message must be an assistant message to be continued");
  ordered_json& last = messages.back();
  last["wo_eos"] = true;
  ChatPrompt p{encode_messages(messages, options), ThinkingMode::kChat};
  // The official rendering closes the reasoning even when nothing follows it: reopen it.
  if (options.thinking_mode == ThinkingMode::kThinking && no_text(last) && !has_tool_calls(last) &&
      ends_with(p.text, kThinkEnd)) {
    p.text.resize(p.text.size() - kThinkEnd.size());
    p.parse_mode = ThinkingMode::kThinking;
  }
  return p;
}

}  // namespace dsv4::chat
