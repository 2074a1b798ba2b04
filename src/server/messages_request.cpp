#include "server/messages_request.h"

#include <fmt/format.h>

#include <string_view>

#include "server/api_error.h"
#include "server/chat_translation.h"

namespace dsv4::server {
namespace {

// Fields the translation consumes; everything else passes through to the chat request.
constexpr std::string_view kMessagesFields[] = {"messages",  "system",         "tools",     "tool_choice",
                                                "thinking",  "stop_sequences", "metadata",  "service_tier",
                                                "container", "mcp_servers",    "max_tokens"};
// Chat fields the translation sets: a Messages request must not send them itself.
constexpr std::string_view kChatOnly[] = {"stop", "response_format", "max_completion_tokens", "reasoning_effort",
                                          "n",    "prompt_logprobs", "return_token_ids"};

// The text of a string or of text blocks (anything else there is refused).
std::string blocks_text(const Json& content, const std::string& at) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad_request(at, "'{}' must be a string or a list of text blocks", at);
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string b = fmt::format("{}[{}]", at, i);
    if (!content[i].is_object() || content[i].value("type", "") != "text") {
      bad_request(b + ".type", "'{}' must be a text block", b);
    }
    text += string_field(content[i], "text", b);
  }
  return text;
}

// One turn of `messages` as chat messages: a user turn's tool results first (tool messages), then its text;
// an assistant turn's text, tool calls and thinking as one assistant message.
void add_turn(const Json& turn, const std::string& at, Json& messages) {
  if (!turn.is_object()) bad_request(at, "'{}' must be an object", at);
  const std::string role = string_field(turn, "role", at);
  if (role != "user" && role != "assistant") {
    bad_request(at + ".role", "'{}.role' must be user or assistant; got \"{}\"", at, role);
  }
  if (!turn.contains("content")) bad_request(at + ".content", "'{}.content' is required", at);
  const Json& content = turn["content"];
  if (content.is_string()) {
    messages.push_back(Json{{"role", role}, {"content", content}});
    return;
  }
  if (!content.is_array()) bad_request(at + ".content", "'{}.content' must be a string or a list of blocks", at);
  std::string text, thinking;
  Json calls = Json::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& block = content[i];
    const std::string b = fmt::format("{}.content[{}]", at, i);
    if (!block.is_object()) bad_request(b, "'{}' must be an object", b);
    const std::string type = block.value("type", "");
    if (type == "text") {
      text += string_field(block, "text", b);
    } else if (type == "tool_result" && role == "user") {
      const Json result = block.contains("content") ? block["content"] : Json("");
      messages.push_back(Json{{"role", "tool"},
                              {"tool_call_id", string_field(block, "tool_use_id", b)},
                              {"content", blocks_text(result, b + ".content")}});
    } else if (type == "tool_use" && role == "assistant") {
      if (!block.contains("input") || !block["input"].is_object()) {
        bad_request(b + ".input", "'{}.input' must be an object", b);
      }
      calls.push_back(
          Json{{"id", string_field(block, "id", b)},
               {"type", "function"},
               {"function", {{"name", string_field(block, "name", b)}, {"arguments", block["input"].dump()}}}});
    } else if (type == "thinking" && role == "assistant") {
      thinking += string_field(block, "thinking", b);
    } else if (type == "redacted_thinking" && role == "assistant") {
      // encrypted elsewhere: nothing of it can be read back
    } else if (type == "image" || type == "document") {
      not_supported(b + ".type", fmt::format("'{}' blocks: this model reads text only", type));
    } else {
      bad_request(b + ".type",
                  "'{}.type' must be text, tool_use, tool_result or thinking (as the role allows); got \"{}\"", b,
                  type);
    }
  }
  if (role == "user") {
    if (!text.empty() || messages.empty() || messages.back()["role"] != "tool")
      messages.push_back(Json{{"role", "user"}, {"content", text}});
    return;
  }
  Json m{{"role", "assistant"}, {"content", text}};
  if (!thinking.empty()) m["reasoning_content"] = thinking;
  if (!calls.empty()) m["tool_calls"] = std::move(calls);
  messages.push_back(std::move(m));
}

// {"name", "description", "input_schema"} as a chat tool's function.
Json tool_function(const Json& t, const std::string& at) {
  Json fn{{"name", string_field(t, "name", at)}};
  if (t.contains("description")) fn["description"] = t["description"];
  fn["parameters"] = t.contains("input_schema") ? t["input_schema"] : Json{{"type", "object"}};
  return fn;
}

void translate_tool_choice(const Json& choice, Json& chat) {
  if (!choice.is_object()) bad_request("tool_choice", "'tool_choice' must be an object");
  const std::string type = choice.value("type", "");
  if (type == "auto") {
    chat["tool_choice"] = "auto";
  } else if (type == "any") {
    chat["tool_choice"] = "required";
  } else if (type == "none") {
    chat["tool_choice"] = "none";
  } else if (type == "tool") {
    chat["tool_choice"] = named_tool_choice(string_field(choice, "name", "tool_choice"));
  } else {
    bad_request("tool_choice.type", "'tool_choice.type' must be auto, any, tool or none; got \"{}\"", type);
  }
  if (choice.value("disable_parallel_tool_use", false)) chat["parallel_tool_calls"] = false;
}

void translate_thinking(const Json& thinking, Json& chat) {
  if (!thinking.is_object()) bad_request("thinking", "'thinking' must be an object");
  const std::string type = thinking.value("type", "");
  if (type != "enabled" && type != "disabled") {
    bad_request("thinking.type", "'thinking.type' must be enabled or disabled; got \"{}\"", type);
  }
  chat["thinking"] = Json{{"type", type}};  // DeepSeek's spelling, which the chat request reads
  if (thinking.contains("budget_tokens")) chat["thinking"]["budget_tokens"] = thinking["budget_tokens"];
}

}  // namespace

Json chat_body_of_messages(const Json& body) {
  if (!body.is_object()) bad_request("", "the request body must be a JSON object");
  const RequestFields f(body);
  for (const char* key : {"mcp_servers", "container"})
    if (f.has(key)) not_supported(key, key);
  const auto max_tokens = f.integer("max_tokens");
  if (!max_tokens || *max_tokens < 1) bad_request("max_tokens", "'max_tokens' is required: a positive integer");
  Json chat = pass_through(body, kMessagesFields, kChatOnly, "Messages API");
  chat["max_tokens"] = *max_tokens;
  Json messages = Json::array();
  if (const Json* system = f.get("system")) {
    const std::string text = blocks_text(*system, "system");
    if (!text.empty()) messages.push_back(Json{{"role", "system"}, {"content", text}});
  }
  const Json* turns = f.array("messages");
  if (turns == nullptr) bad_request("messages", "'messages' is required: a list of turns");
  for (size_t i = 0; i < turns->size(); ++i) add_turn((*turns)[i], fmt::format("messages[{}]", i), messages);
  chat["messages"] = std::move(messages);
  if (const Json* tools = f.get("tools")) chat["tools"] = chat_tools(*tools, "custom", "custom", tool_function);
  if (const Json* choice = f.get("tool_choice")) translate_tool_choice(*choice, chat);
  if (const Json* thinking = f.get("thinking")) translate_thinking(*thinking, chat);
  if (const Json* stop = f.array("stop_sequences")) chat["stop"] = *stop;
  if (const Json* metadata = f.object("metadata")) {
    const RequestFields m(*metadata, "metadata.");
    if (const auto user = m.string("user_id")) chat["user"] = *user;
  }
  return chat;
}

ChatRequest parse_messages_request(const Json& body) { return parse_chat_request(chat_body_of_messages(body)); }

}  // namespace dsv4::server
