// A line-by-line port of encoding_dsv4.py: merge_tool_messages -> sort_tool_results_by_call_order
// -> _drop_thinking_messages -> render_message per message. Messages stay JSON objects so the
// Python dict semantics (get, "in", truthiness, shallow copies) carry over one to one.
#include "chat/encoding.h"

#include <algorithm>
#include <map>
#include <vector>

#include "chat/dsml.h"
#include "chat/message_check.h"
#include "chat/python_json.h"
#include "chat/special_tokens.h"
#include "core/error.h"

namespace dsv4::chat {
namespace {

using ordered_json = nlohmann::ordered_json;
using Messages = std::vector<ordered_json>;

constexpr std::string_view kReasoningEffortMax =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root "
    "cause, rigorously stress-testing your logic against all potential paths, edge cases, and adversarial "
    "scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered "
    "alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n";

constexpr std::string_view kResponseFormatPrefix =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

// TOOLS_TEMPLATE around the schema lines, with the DSML and thinking tokens filled in.
constexpr std::string_view kToolsHead =
    "## Tools\n\n"
    "You have access to a set of tools to help answer the user's question. You can invoke tools by writing a "
    "\"<｜DSML｜tool_calls>\" block like the following:\n\n"
    "<｜DSML｜tool_calls>\n"
    "<｜DSML｜invoke name=\"$TOOL_NAME\">\n"
    "<｜DSML｜parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</｜DSML｜parameter>\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "<｜DSML｜invoke name=\"$TOOL_NAME2\">\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "</｜DSML｜tool_calls>\n\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other types (numbers, booleans, "
    "arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\n"
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside "
    "<think>...</think> BEFORE any tool calls or final response.\n\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n\n"
    "### Available Tool Schemas\n\n";
constexpr std::string_view kToolsTail =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";

struct TaskToken {
  std::string_view task;
  std::string_view token;
};
constexpr TaskToken kTaskTokens[] = {{"action", "<｜action｜>"},       {"query", "<｜query｜>"},
                                     {"authority", "<｜authority｜>"}, {"domain", "<｜domain｜>"},
                                     {"title", "<｜title｜>"},         {"read_url", "<｜read_url｜>"}};

// msg.get(key), with JSON null read as None.
const ordered_json* get(const ordered_json& msg, const char* key) {
  auto it = msg.find(key);
  return it == msg.end() || it->is_null() ? nullptr : &*it;
}

bool truthy(const ordered_json* v) {
  if (!v) return false;
  switch (v->type()) {
    case ordered_json::value_t::boolean:
      return v->get<bool>();
    case ordered_json::value_t::number_integer:
    case ordered_json::value_t::number_unsigned:
    case ordered_json::value_t::number_float:
      return v->get<double>() != 0;
    case ordered_json::value_t::string:
      return !v->get_ref<const std::string&>().empty();
    case ordered_json::value_t::array:
    case ordered_json::value_t::object:
      return !v->empty();
    default:
      return false;
  }
}

// `msg.get(key) or ""` for a field that check_messages has made a string or null.
std::string str_or_empty(const ordered_json& msg, const char* key) {
  const ordered_json* v = get(msg, key);
  return v && v->is_string() ? v->get<std::string>() : std::string();
}

std::string role_of(const ordered_json& msg) { return str_or_empty(msg, "role"); }

std::string_view task_token(const std::string& task) {
  for (const auto& t : kTaskTokens)
    if (t.task == task) return t.token;
  fail("invalid task \"{}\"", task);
}

std::string render_tools(const ordered_json& tools) {
  std::string out(kToolsHead);
  for (size_t i = 0; i < tools.size(); ++i) {
    if (i > 0) out += '\n';
    out += python_json_dumps(tools[i].at("function"));  // tools_from_openai_format
  }
  out += kToolsTail;
  return out;
}

// The tools section and response format that system and developer messages append.
std::string render_tools_and_format(const ordered_json& msg) {
  std::string out;
  if (const ordered_json* tools = get(msg, "tools"); truthy(tools)) out += "\n\n" + render_tools(*tools);
  if (const ordered_json* format = get(msg, "response_format"); truthy(format)) {
    out += "\n\n";
    out += kResponseFormatPrefix;
    out += python_json_dumps(*format);
  }
  return out;
}

// encode_arguments_to_dsml: a JSON-object string, else one string parameter "arguments".
std::string render_arguments(const ordered_json& arguments) {
  if (arguments.is_object()) return render_dsml_parameters(arguments);
  const std::string& text = arguments.get_ref<const std::string&>();
  ordered_json parsed = ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return render_dsml_parameters(ordered_json{{"arguments", text}});
  DSV4_CHECK(parsed.is_object(), "tool call arguments must encode a JSON object, got {}: {}", parsed.type_name(), text);
  return render_dsml_parameters(parsed);
}

std::string render_tool_calls(const ordered_json& tool_calls) {
  std::vector<std::string> invokes;
  for (const auto& call : tool_calls) {
    const ordered_json& function = call.at("function");
    invokes.push_back(
        render_dsml_invoke(function.at("name").get<std::string>(), render_arguments(function.at("arguments"))));
  }
  return render_dsml_tool_calls(invokes);
}

std::string render_tool_result(const ordered_json& block) {
  const ordered_json* content = get(block, "content");
  std::string text;
  if (content && content->is_array()) {
    for (size_t i = 0; i < content->size(); ++i) {
      const ordered_json& b = (*content)[i];
      if (i > 0) text += "\n\n";
      const ordered_json* type = get(b, "type");
      if (type && *type == "text") {
        text += str_or_empty(b, "text");
      } else {
        text += "[Unsupported " + (type && type->is_string() ? type->get<std::string>() : std::string("None")) + "]";
      }
    }
  } else if (content && content->is_string()) {
    text = content->get<std::string>();
  }
  return "<tool_result>" + text + "</tool_result>";
}

std::string render_user(const ordered_json& msg) {
  std::string out(kUser);
  const ordered_json* blocks = get(msg, "content_blocks");
  if (!truthy(blocks)) return out + str_or_empty(msg, "content");
  for (size_t i = 0; i < blocks->size(); ++i) {
    const ordered_json& block = (*blocks)[i];
    if (i > 0) out += "\n\n";
    const std::string type = str_or_empty(block, "type");
    if (type == "text") {
      out += str_or_empty(block, "text");
    } else if (type == "tool_result") {
      out += render_tool_result(block);
    } else {
      out += "[Unsupported " + type + "]";
    }
  }
  return out;
}

int find_last_user_index(const Messages& messages) {
  for (int i = static_cast<int>(messages.size()) - 1; i >= 0; --i) {
    const std::string role = role_of(messages[static_cast<size_t>(i)]);
    if (role == "user" || role == "developer") return i;
  }
  return -1;
}

struct RenderFlags {
  ThinkingMode mode;
  bool drop_thinking;
  ReasoningEffort effort;
  bool add_generation_prompt;
};

std::string render_assistant(int index, const Messages& messages, int last_user_idx, const RenderFlags& flags) {
  const ordered_json& msg = messages[static_cast<size_t>(index)];
  std::string tool_calls;
  if (const ordered_json* calls = get(msg, "tool_calls"); truthy(calls)) tool_calls = render_tool_calls(*calls);
  // An assistant right after a task message is a task output: no thinking part.
  const bool prev_has_task = index >= 1 && get(messages[static_cast<size_t>(index - 1)], "task") != nullptr;
  std::string thinking;
  if (flags.mode == ThinkingMode::kThinking && !prev_has_task && (!flags.drop_thinking || index > last_user_idx)) {
    thinking = str_or_empty(msg, "reasoning_content") + std::string(kThinkEnd);
  }
  std::string out = thinking + str_or_empty(msg, "content") + tool_calls;
  if (!truthy(get(msg, "wo_eos"))) out += kEos;
  return out;
}

std::string render_body(int index, const Messages& messages, int last_user_idx, const RenderFlags& flags) {
  const ordered_json& msg = messages[static_cast<size_t>(index)];
  const std::string role = role_of(msg);
  if (role == "system") return str_or_empty(msg, "content") + render_tools_and_format(msg);
  if (role == "developer") {
    const std::string content = str_or_empty(msg, "content");
    DSV4_CHECK(!content.empty(), "a developer message needs non-empty content");
    return std::string(kUser) + content + render_tools_and_format(msg);
  }
  if (role == "user") return render_user(msg);
  if (role == "latest_reminder") return std::string(kLatestReminder) + str_or_empty(msg, "content");
  if (role == "assistant") return render_assistant(index, messages, last_user_idx, flags);
  fail("cannot render a message with role \"{}\"", role);
}

// What follows a message when the next one is an assistant/latest_reminder or there is none:
// a task token, or the generation prompt after a user/developer message.
std::string render_transition(int index, const Messages& messages, int last_user_idx, const RenderFlags& flags) {
  const size_t next = static_cast<size_t>(index) + 1;
  if (next < messages.size()) {
    const std::string next_role = role_of(messages[next]);
    if (next_role != "assistant" && next_role != "latest_reminder") return "";
  }
  const ordered_json& msg = messages[static_cast<size_t>(index)];
  const bool thinking = flags.mode == ThinkingMode::kThinking;
  if (const ordered_json* task = get(msg, "task")) {
    const std::string_view token = task_token(task->get<std::string>());
    if (*task != "action") return std::string(token);
    return std::string(kAssistant) + std::string(thinking ? kThinkStart : kThinkEnd) + std::string(token);
  }
  const std::string role = role_of(msg);
  if (role != "user" && role != "developer") return "";
  if (next == messages.size() && !flags.add_generation_prompt) return "";
  const bool open_thinking = thinking && (!flags.drop_thinking || index >= last_user_idx);
  return std::string(kAssistant) + std::string(open_thinking ? kThinkStart : kThinkEnd);
}

std::string render_message(int index, const Messages& messages, const RenderFlags& flags) {
  const int last_user_idx = find_last_user_index(messages);
  std::string out;
  if (index == 0 && flags.mode == ThinkingMode::kThinking && flags.effort == ReasoningEffort::kMax) {
    out += kReasoningEffortMax;
  }
  out += render_body(index, messages, last_user_idx, flags);
  out += render_transition(index, messages, last_user_idx, flags);
  return out;
}

bool has_content_blocks(const ordered_json& msg) { return msg.contains("content_blocks"); }

// Tool messages become tool_result blocks of a user message; consecutive user messages (and tool
// results) share one user message unless the earlier one carries a task.
Messages merge_tool_messages(const ordered_json& messages) {
  Messages merged;
  for (const ordered_json& msg : messages) {
    const std::string role = role_of(msg);
    const bool after_merged_user =
        !merged.empty() && role_of(merged.back()) == "user" && has_content_blocks(merged.back());
    if (role == "tool") {
      ordered_json block = {{"type", "tool_result"},
                            {"tool_use_id", msg.value("tool_call_id", ordered_json(""))},
                            {"content", msg.value("content", ordered_json(""))}};
      if (after_merged_user) {
        merged.back()["content_blocks"].push_back(std::move(block));
      } else {
        merged.push_back({{"role", "user"}, {"content_blocks", ordered_json::array({std::move(block)})}});
      }
    } else if (role == "user") {
      ordered_json text_block = {{"type", "text"}, {"text", str_or_empty(msg, "content")}};
      if (after_merged_user && get(merged.back(), "task") == nullptr) {
        merged.back()["content_blocks"].push_back(std::move(text_block));
      } else {
        ordered_json user = {{"role", "user"},
                             {"content", msg.value("content", ordered_json(""))},
                             {"content_blocks", ordered_json::array({std::move(text_block)})}};
        for (const char* key : {"task", "wo_eos", "mask"})
          if (msg.contains(key)) user[key] = msg[key];
        merged.push_back(std::move(user));
      }
    } else {
      merged.push_back(msg);
    }
  }
  return merged;
}

// Re-orders the tool_result blocks of each user message by the order of the preceding
// assistant's tool_calls ids (unknown ids sort as position 0; the sort is stable).
void sort_tool_results_by_call_order(Messages& messages) {
  std::map<std::string, int> order;
  for (ordered_json& msg : messages) {
    const std::string role = role_of(msg);
    if (role == "assistant" && truthy(get(msg, "tool_calls"))) {
      order.clear();
      int idx = 0;
      for (const auto& call : msg["tool_calls"]) {
        std::string id = str_or_empty(call, "id");
        if (id.empty() && get(call, "function")) id = str_or_empty(call["function"], "id");
        if (!id.empty()) order[id] = idx;  // a repeated id keeps its last position, as in a dict
        ++idx;
      }
    } else if (role == "user" && truthy(get(msg, "content_blocks"))) {
      ordered_json& blocks = msg["content_blocks"];
      std::vector<ordered_json> results;
      for (const auto& b : blocks)
        if (str_or_empty(b, "type") == "tool_result") results.push_back(b);
      if (results.size() <= 1 || order.empty()) continue;
      auto key = [&](const ordered_json& b) {
        auto it = order.find(str_or_empty(b, "tool_use_id"));
        return it == order.end() ? 0 : it->second;
      };
      std::stable_sort(results.begin(), results.end(),
                       [&](const ordered_json& a, const ordered_json& b) { return key(a) < key(b); });
      size_t next = 0;
      for (auto& b : blocks)
        if (str_or_empty(b, "type") == "tool_result") b = results[next++];
    }
  }
}

// Before the last user/developer message: assistants lose reasoning_content, developers go.
Messages drop_thinking_messages(const Messages& messages) {
  const int last_user_idx = find_last_user_index(messages);
  Messages out;
  for (int i = 0; i < static_cast<int>(messages.size()); ++i) {
    const ordered_json& msg = messages[static_cast<size_t>(i)];
    const std::string role = role_of(msg);
    const bool keep = role == "user" || role == "system" || role == "tool" || role == "latest_reminder";
    if (keep || i >= last_user_idx) {
      out.push_back(msg);
    } else if (role == "assistant") {
      ordered_json copy = msg;
      copy.erase("reasoning_content");
      out.push_back(std::move(copy));
    }
  }
  return out;
}

}  // namespace

std::string encode_messages(const ordered_json& messages_in, const EncodeOptions& options) {
  const ordered_json messages = check_messages(messages_in, "messages");
  const ordered_json context_raw = check_messages(options.context, "context");

  Messages merged = merge_tool_messages(messages);
  Messages combined(context_raw.begin(), context_raw.end());
  combined.insert(combined.end(), merged.begin(), merged.end());
  sort_tool_results_by_call_order(combined);  // the context's last tool calls order the first results
  merged.assign(combined.begin() + static_cast<std::ptrdiff_t>(context_raw.size()), combined.end());
  Messages context;
  if (!context_raw.empty()) {
    context = merge_tool_messages(context_raw);
    sort_tool_results_by_call_order(context);
  }

  Messages full = context;
  full.insert(full.end(), merged.begin(), merged.end());
  std::string prompt = options.add_default_bos_token && context.empty() ? std::string(kBos) : "";

  const bool any_tools =
      std::any_of(full.begin(), full.end(), [](const ordered_json& m) { return truthy(get(m, "tools")); });
  const bool drop = options.drop_thinking && !any_tools;
  const RenderFlags flags{options.thinking_mode, drop, options.reasoning_effort, options.add_generation_prompt};

  int num_to_render = static_cast<int>(merged.size());
  int context_len = static_cast<int>(context.size());
  if (options.thinking_mode == ThinkingMode::kThinking && drop) {
    full = drop_thinking_messages(full);
    num_to_render = static_cast<int>(full.size()) - static_cast<int>(drop_thinking_messages(context).size());
    context_len = static_cast<int>(full.size()) - num_to_render;
  }
  for (int i = 0; i < num_to_render; ++i) prompt += render_message(i + context_len, full, flags);
  return prompt;
}

ThinkingMode parse_thinking_mode(std::string_view s) {
  if (s == "chat") return ThinkingMode::kChat;
  if (s == "thinking") return ThinkingMode::kThinking;
  fail("thinking_mode must be \"chat\" or \"thinking\", got \"{}\"", s);
}

std::string_view to_string(ThinkingMode m) { return m == ThinkingMode::kChat ? "chat" : "thinking"; }

ReasoningEffort parse_reasoning_effort(const ordered_json& v) {
  if (v.is_null()) return ReasoningEffort::kNone;
  if (v == "high") return ReasoningEffort::kHigh;
  if (v == "max") return ReasoningEffort::kMax;
  fail("reasoning_effort must be null, \"high\" or \"max\", got {}", v.dump());
}

}  // namespace dsv4::chat
