#include "server/chat_request.h"

#include "server/api_error.h"

namespace dsv4::server {
namespace {

std::optional<bool> explicit_thinking(const RequestFields& f, const RequestFields* kwargs) {
  if (kwargs != nullptr) {
    if (const auto t = kwargs->boolean("thinking")) return t;
    if (const auto t = kwargs->boolean("enable_thinking")) return t;
  }
  if (const Json* t = f.object("thinking")) {  // DeepSeek's API: {"type": "enabled" | "disabled"}
    const auto type = RequestFields(*t, "thinking.").string("type").value_or("");
    if (type != "enabled" && type != "disabled") {
      bad_request("thinking", "'thinking.type' must be \"enabled\" or \"disabled\", got \"{}\"", type);
    }
    return type == "enabled";
  }
  return std::nullopt;
}

std::optional<std::string> reasoning_effort(const RequestFields& f, const RequestFields* kwargs) {
  auto effort = f.string("reasoning_effort");
  if (!effort && kwargs != nullptr) effort = kwargs->string("reasoning_effort");
  if (effort && *effort != "none" && *effort != "minimal" && *effort != "low" && *effort != "medium" &&
      *effort != "high" && *effort != "max") {
    bad_request("reasoning_effort",
                "'reasoning_effort' must be one of none, minimal, low, medium, high, max; got \"{}\"", *effort);
  }
  return effort;
}

Json checked_tools(const RequestFields& f) {
  const Json* tools = f.array("tools");
  if (tools == nullptr) return Json::array();
  for (size_t i = 0; i < tools->size(); ++i) {
    const Json& t = (*tools)[i];
    const std::string param = fmt::format("tools[{}]", i);
    if (!t.is_object()) bad_request(param, "'{}' must be an object, got {}", param, json_excerpt(t));
    const RequestFields tf(t, param + ".");
    if (tf.string("type").value_or("function") != "function") {
      not_supported(param + ".type", fmt::format("Tool type \"{}\"", *tf.string("type")));
    }
    const Json* fn = tf.object("function");
    if (fn == nullptr || !RequestFields(*fn, param + ".function.").string("name")) {
      bad_request(param, "'{}.function.name' is required", param);
    }
  }
  return *tools;
}

void attach_tools(Json& messages, Json tools) {
  if (!messages.empty() && messages[0].is_object()) {
    Json& first = messages[0];
    const auto role = first.value("role", Json()).is_string() ? first["role"].get<std::string>() : "";
    if (role == "system" || role == "developer") {
      if (first.contains("tools") && !first["tools"].is_null()) {
        bad_request("tools", "'tools' is given both on the request and on messages[0]");
      }
      first["tools"] = std::move(tools);
      return;
    }
  }
  messages.insert(messages.begin(), Json{{"role", "system"}, {"content", ""}, {"tools", std::move(tools)}});
}

// DeepSeek's prefix completion: {"role": "assistant", "prefix": true} as the last message is continued.
// Returns whether the last message asks for it; `prefix` anywhere else is refused. The key is removed.
bool take_prefix(Json& messages) {
  bool last_is_prefix = false;
  for (size_t i = 0; i < messages.size(); ++i) {
    Json& m = messages[i];
    if (!m.is_object() || !m.contains("prefix")) continue;
    const std::string param = fmt::format("messages[{}].prefix", i);
    const auto prefix = RequestFields(m, fmt::format("messages[{}].", i)).boolean("prefix").value_or(false);
    const bool last_assistant = i + 1 == messages.size() && m.value("role", Json()) == "assistant";
    if (prefix && !last_assistant)
      bad_request(param, "'{}' is only allowed on the last message, an assistant one", param);
    last_is_prefix = prefix;
    m.erase("prefix");
  }
  return last_is_prefix;
}

// Whether the last message is continued (see the header), checking the combinations vLLM refuses.
bool continues_final_message(const RequestFields& f, Json& messages) {
  const bool prefix = take_prefix(messages);
  const auto continue_final = f.boolean("continue_final_message");
  const auto add_prompt = f.boolean("add_generation_prompt");
  if (continue_final.value_or(false) && add_prompt.value_or(false)) {
    bad_request("add_generation_prompt",
                "Cannot set both 'continue_final_message' and 'add_generation_prompt' to true");
  }
  const bool last_assistant = messages.back().is_object() && messages.back().value("role", Json()) == "assistant";
  const bool continued = prefix || continue_final.value_or(false);
  if (continued && !last_assistant) {
    bad_request("continue_final_message", "'continue_final_message' needs the last message to be an assistant one");
  }
  if (!continued && last_assistant) {
    bad_request("messages",
                "'messages' ends with an assistant message: set 'continue_final_message': true (or \"prefix\": true "
                "on that message) to continue it");
  }
  return continued;
}

Json checked_messages(const RequestFields& f) {
  const Json* m = f.array("messages");
  if (m == nullptr) bad_request("messages", "'messages' is required");
  if (m->empty()) bad_request("messages", "'messages' must not be empty");
  Json messages = *m;
  for (Json& msg : messages) {
    if (!msg.is_object()) continue;  // the encoder's check names it
    const auto it = msg.find("reasoning");
    if (it == msg.end()) continue;
    if (!msg.contains("reasoning_content") || msg["reasoning_content"].is_null()) msg["reasoning_content"] = *it;
    msg.erase("reasoning");
  }
  return messages;
}

}  // namespace

chat::EncodeOptions thinking_options(const RequestFields& f) {
  const Json* kw = f.object("chat_template_kwargs");
  const std::optional<RequestFields> kwargs =
      kw ? std::optional<RequestFields>(RequestFields(*kw, "chat_template_kwargs.")) : std::nullopt;
  const RequestFields* k = kwargs ? &*kwargs : nullptr;
  const auto effort = reasoning_effort(f, k);
  const bool thinking = explicit_thinking(f, k).value_or(effort.has_value() && *effort != "none");
  chat::EncodeOptions o;
  o.thinking_mode = thinking ? chat::ThinkingMode::kThinking : chat::ThinkingMode::kChat;
  if (thinking && effort == "max") o.reasoning_effort = chat::ReasoningEffort::kMax;
  if (thinking && effort == "high") o.reasoning_effort = chat::ReasoningEffort::kHigh;
  if (k != nullptr) o.drop_thinking = k->boolean("drop_thinking").value_or(true);
  return o;
}

ChatRequest parse_chat_request(const Json& body) {
  const RequestFields f(body);
  refuse_unsupported(f, Endpoint::kChat);
  ChatRequest r;
  r.messages = checked_messages(f);
  r.continue_final = continues_final_message(f, r.messages);
  r.tools = checked_tools(f);
  r.tool_choice = parse_tool_choice(f);
  r.structured = parse_structured_output(f);
  if (r.tool_choice.mode != ToolChoice::Mode::kNone && !r.tools.empty()) attach_tools(r.messages, r.tools);
  r.encode = thinking_options(f);
  if (const Json* t = f.object("thinking")) {
    r.thinking_budget = RequestFields(*t, "thinking.").integer_in("budget_tokens", 0, INT32_MAX).value_or(-1);
  }
  r.encode.add_generation_prompt = !r.continue_final && f.boolean("add_generation_prompt").value_or(true);
  r.include_reasoning = f.boolean("include_reasoning").value_or(true);
  r.parallel_tool_calls = f.boolean("parallel_tool_calls").value_or(true);
  r.options = parse_generation_options(f, {"max_completion_tokens", "max_tokens"});
  r.logprobs = f.boolean("logprobs").value_or(false);
  r.top_logprobs = static_cast<int>(f.integer_in("top_logprobs", 0, kMaxLogprobs).value_or(0));
  if (r.top_logprobs > 0 && !r.logprobs) bad_request("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  r.options.logprobs = r.logprobs ? r.top_logprobs : -1;
  return r;
}

}  // namespace dsv4::server
