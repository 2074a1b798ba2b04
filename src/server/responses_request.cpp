#include "server/responses_request.h"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>

#include "engine/sampling_params.h"
#include "server/api_error.h"
#include "server/chat_translation.h"

namespace dsv4::server {
namespace {

// What needs a response store: refused, saying what to send instead.
[[noreturn]] void needs_store(std::string param, std::string_view what) {
  throw ApiError(400, "invalid_request_error",
                 fmt::format("{} is not supported: this server keeps no responses; send the whole conversation as "
                             "input (its earlier turns as items)",
                             what),
                 std::move(param), "not_supported");
}

constexpr std::string_view kLogprobsInclude = "message.output_text.logprobs";

// Fields the translation consumes; everything else passes through to the chat request.
constexpr std::string_view kResponsesFields[] = {"input",
                                                 "instructions",
                                                 "max_output_tokens",
                                                 "tools",
                                                 "tool_choice",
                                                 "text",
                                                 "reasoning",
                                                 "metadata",
                                                 "store",
                                                 "include",
                                                 "truncation",
                                                 "service_tier",
                                                 "stream_options",
                                                 "safety_identifier",
                                                 "prompt_cache_key",
                                                 "previous_response_id",
                                                 "conversation",
                                                 "background",
                                                 "prompt",
                                                 "max_tool_calls",
                                                 "top_logprobs"};
// Chat fields the translation sets: a Responses request must not send them itself.
constexpr std::string_view kChatOnly[] = {"messages", "max_tokens",       "max_completion_tokens", "response_format",
                                          "logprobs", "reasoning_effort", "prompt_logprobs",       "return_token_ids"};

// The text of a content: a string, or parts of input_text / output_text / text (joined); other parts
// (images, files, audio) are refused.
std::string content_text(const Json& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad_request(where, "'{}' must be a string or a list of content parts", where);
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& part = content[i];
    const std::string at = fmt::format("{}[{}]", where, i);
    if (!part.is_object()) bad_request(at, "'{}' must be an object", at);
    const std::string type = part.value("type", "");
    if (type == "input_text" || type == "output_text" || type == "text" || type == "reasoning_text" ||
        type == "summary_text") {
      const auto it = part.find("text");
      if (it == part.end() || !it->is_string()) bad_request(at + ".text", "'{}.text' must be a string", at);
      text += it->get<std::string>();
    } else if (type == "input_image" || type == "input_file" || type == "input_audio") {
      not_supported(at + ".type", fmt::format("'{}' parts: this model reads text only", type));
    } else {
      bad_request(at + ".type", "'{}.type' must be input_text or output_text; got \"{}\"", at, type);
    }
  }
  return text;
}

// The chat messages of `input` (after the instructions' system message, when given).
class Conversation {
 public:
  explicit Conversation(Json& messages) : messages_(messages) {}

  void add_item(const Json& item, const std::string& at) {
    if (!item.is_object()) bad_request(at, "'{}' must be an object", at);
    const std::string type = item.value("type", item.contains("role") ? "message" : "");
    if (type == "message") return message(item, at);
    if (type == "function_call") return function_call(item, at);
    if (type == "function_call_output") return function_output(item, at);
    if (type == "reasoning") {  // its full text (content), else its summary
      const auto content = item.find("content");
      const bool full = content != item.end() && !content->is_null() && !content->empty();
      const std::string key = full ? "content" : "summary";
      reasoning_ = item.contains(key) ? content_text(item[key], at + "." + key) : "";
      return;
    }
    if (type == "item_reference") needs_store(at + ".type", "item_reference");
    bad_request(at + ".type", "'{}.type' must be message, function_call, function_call_output or reasoning; got \"{}\"",
                at, type);
  }

 private:
  void message(const Json& item, const std::string& at) {
    const std::string role = string_field(item, "role", at);
    if (role != "user" && role != "system" && role != "developer" && role != "assistant") {
      bad_request(at + ".role", "'{}.role' must be user, system, developer or assistant; got \"{}\"", at, role);
    }
    if (!item.contains("content")) bad_request(at + ".content", "'{}.content' is required", at);
    Json m{{"role", role}, {"content", content_text(item["content"], at + ".content")}};
    if (role == "assistant") take_reasoning(m);
    messages_.push_back(std::move(m));
    open_assistant_ = role == "assistant";
  }

  // A tool call joins the assistant turn it follows (or opens one).
  void function_call(const Json& item, const std::string& at) {
    Json call{
        {"id", string_field(item, "call_id", at)},
        {"type", "function"},
        {"function", {{"name", string_field(item, "name", at)}, {"arguments", string_field(item, "arguments", at)}}}};
    if (!open_assistant_) {
      Json m{{"role", "assistant"}, {"content", ""}};
      take_reasoning(m);
      messages_.push_back(std::move(m));
      open_assistant_ = true;
    }
    Json& m = messages_.back();
    if (!m.contains("tool_calls")) m["tool_calls"] = Json::array();
    m["tool_calls"].push_back(std::move(call));
  }

  void function_output(const Json& item, const std::string& at) {
    if (!item.contains("output")) bad_request(at + ".output", "'{}.output' is required", at);
    messages_.push_back(Json{{"role", "tool"},
                             {"tool_call_id", string_field(item, "call_id", at)},
                             {"content", content_text(item["output"], at + ".output")}});
    open_assistant_ = false;
  }

  void take_reasoning(Json& m) {
    if (!reasoning_.empty()) m["reasoning_content"] = std::move(reasoning_);
    reasoning_.clear();
  }

  Json& messages_;
  std::string reasoning_;        // a reasoning item's text, for the next assistant turn
  bool open_assistant_ = false;  // the last message is an assistant turn that tool calls may join
};

Json messages_of(const RequestFields& f) {
  Json messages = Json::array();
  if (const auto instructions = f.string("instructions"); instructions && !instructions->empty()) {
    messages.push_back(Json{{"role", "system"}, {"content", *instructions}});
  }
  const Json* input = f.get("input");
  if (input == nullptr) bad_request("input", "'input' is required");
  if (input->is_string()) {
    messages.push_back(Json{{"role", "user"}, {"content", input->get<std::string>()}});
    return messages;
  }
  if (!input->is_array()) bad_request("input", "'input' must be a string or a list of items");
  Conversation conversation(messages);
  for (size_t i = 0; i < input->size(); ++i) conversation.add_item((*input)[i], fmt::format("input[{}]", i));
  return messages;
}

// {"type": "function", "name", "description", "parameters", "strict"} as a chat tool's function.
Json tool_function(const Json& t, const std::string& at) {
  Json fn{{"name", string_field(t, "name", at)}};
  for (const char* key : {"description", "parameters", "strict"})
    if (t.contains(key) && !t[key].is_null()) fn[key] = t[key];
  return fn;
}

Json chat_tool_choice(const Json& choice) {
  if (choice.is_string()) return choice;
  if (!choice.is_object() || choice.value("type", "") != "function") {
    not_supported("tool_choice", "tool_choice other than none, auto, required or {\"type\": \"function\", \"name\"}");
  }
  return named_tool_choice(string_field(choice, "name", "tool_choice"));
}

// text.format as response_format (none for "text").
void translate_text(const Json& text, Json& chat) {
  if (!text.is_object()) bad_request("text", "'text' must be an object");
  // verbosity is accepted and does nothing here, as in vLLM (a hint some OpenAI models take).
  if (const auto v = RequestFields(text, "text.").string("verbosity");
      v && *v != "low" && *v != "medium" && *v != "high") {
    bad_request("text.verbosity", "'text.verbosity' must be low, medium or high; got \"{}\"", *v);
  }
  if (!text.contains("format") || text["format"].is_null()) return;
  const Json& format = text["format"];
  if (!format.is_object()) bad_request("text.format", "'text.format' must be an object");
  const std::string type = format.value("type", "");
  if (type == "text") return;
  if (type == "json_object") {
    chat["response_format"] = Json{{"type", "json_object"}};
  } else if (type == "json_schema") {
    Json schema{{"name", format.value("name", "response")}};
    for (const char* key : {"schema", "strict", "description"})
      if (format.contains(key)) schema[key] = format[key];
    chat["response_format"] = Json{{"type", "json_schema"}, {"json_schema", std::move(schema)}};
  } else {
    bad_request("text.format.type", "'text.format.type' must be text, json_object or json_schema; got \"{}\"", type);
  }
}

// reasoning.effort as the chat's reasoning_effort: OpenAI's "xhigh" is V4's maximum effort.
std::string chat_effort(const std::string& effort) {
  if (effort == "xhigh") return "max";
  for (const char* e : {"none", "minimal", "low", "medium", "high", "max"})
    if (effort == e) return effort;
  bad_request("reasoning.effort",
              "'reasoning.effort' must be one of none, minimal, low, medium, high, xhigh; got \"{}\"", effort);
}

// Refuses what needs a store or is not implemented; accepts harmless values of the rest.
void refuse_unsupported_responses(const RequestFields& f) {
  for (const char* key : {"previous_response_id", "conversation"})
    if (f.has(key)) needs_store(key, key);
  if (f.boolean("background").value_or(false)) not_supported("background", "background responses");
  if (f.has("prompt")) not_supported("prompt", "prompt templates");
  if (f.has("max_tool_calls")) not_supported("max_tool_calls", "max_tool_calls");
  if (const Json* include = f.array("include")) {
    for (const Json& i : *include) {
      if (i != kLogprobsInclude && i != "reasoning.encrypted_content") {
        not_supported("include", fmt::format("include {}", i.dump()));
      }
    }
  }
  if (const auto t = f.string("truncation"); t && *t != "disabled") {
    not_supported("truncation", "truncation \"" + *t + "\" (disabled only)");
  }
  if (f.integer("n").value_or(1) != 1) not_supported("n", "n other than 1 on /v1/responses");
}

}  // namespace

Json chat_body_of_responses(const Json& body) {
  const RequestFields f(body);
  refuse_unsupported_responses(f);
  Json chat = pass_through(body, kResponsesFields, kChatOnly, "Responses API");
  chat["messages"] = messages_of(f);
  if (const Json* tools = f.get("tools")) chat["tools"] = chat_tools(*tools, "function", "", tool_function);
  if (const Json* choice = f.get("tool_choice")) chat["tool_choice"] = chat_tool_choice(*choice);
  if (const Json* text = f.get("text")) translate_text(*text, chat);
  if (const Json* reasoning = f.object("reasoning")) {
    if (const auto effort = RequestFields(*reasoning, "reasoning.").string("effort")) {
      chat["reasoning_effort"] = chat_effort(*effort);
    }
  }
  // Logprobs of the output text: asked for by include, or by top_logprobs alone.
  const int64_t top = f.integer_in("top_logprobs", 0, kMaxLogprobs).value_or(0);
  const Json* include = f.array("include");
  if (top > 0 || (include && std::find(include->begin(), include->end(), kLogprobsInclude) != include->end())) {
    chat["logprobs"] = true;
    chat["top_logprobs"] = top;
  }
  if (const Json* max = f.get("max_output_tokens")) {
    if (!max->is_number_integer() || max->get<int64_t>() < 1) {
      bad_request("max_output_tokens", "'max_output_tokens' must be a positive integer");
    }
    chat["max_tokens"] = *max;
  }
  return chat;
}

ResponsesRequest parse_responses_request(const Json& body) {
  if (!body.is_object()) bad_request("", "the request body must be a JSON object");
  ResponsesRequest r;
  r.chat = parse_chat_request(chat_body_of_responses(body));
  for (const char* key : {"instructions", "max_output_tokens", "tools", "tool_choice", "text", "reasoning", "metadata",
                          "temperature", "top_p", "parallel_tool_calls", "user"}) {
    r.echo[key] = body.contains(key) ? body[key] : Json();
  }
  if (r.echo["tool_choice"].is_null()) r.echo["tool_choice"] = "auto";
  if (r.echo["tools"].is_null()) r.echo["tools"] = Json::array();
  if (r.echo["text"].is_null()) r.echo["text"] = Json{{"format", {{"type", "text"}}}};
  if (r.echo["parallel_tool_calls"].is_null()) r.echo["parallel_tool_calls"] = true;
  if (r.echo["metadata"].is_null()) r.echo["metadata"] = Json::object();
  return r;
}

}  // namespace dsv4::server
