#include "chat/message_check.h"

#include <array>
#include <string>

#include "core/error.h"

namespace dsv4::chat {
namespace {

using ordered_json = nlohmann::ordered_json;

constexpr std::array<std::string_view, 6> kRoles = {"system",    "developer", "user",
                                                    "assistant", "tool",      "latest_reminder"};
constexpr std::array<std::string_view, 6> kTasks = {"action", "query", "authority", "domain", "title", "read_url"};

template <size_t N>
bool contains(const std::array<std::string_view, N>& set, const std::string& s) {
  for (auto v : set)
    if (v == s) return true;
  return false;
}

// The field, or nullptr when it is absent or null (Python's msg.get(key) is None).
const ordered_json* field(const ordered_json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

void check_optional_string(const ordered_json& msg, const char* key, const std::string& path) {
  const ordered_json* v = field(msg, key);
  DSV4_CHECK(!v || v->is_string(), "{}.{} must be a string, got {}", path, key, v ? v->type_name() : "");
}

// [{"type": "text", "text": "..."}, ...] -> the texts joined by "\n\n".
std::string flatten_text_parts(const ordered_json& parts, const std::string& path) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    const ordered_json& part = parts[i];
    const std::string p = fmt::format("{}[{}]", path, i);
    DSV4_CHECK(part.is_object(), "{} must be an object, got {}", p, part.type_name());
    const ordered_json* type = field(part, "type");
    DSV4_CHECK(type && type->is_string() && *type == "text",
               "{}.type: only \"text\" content parts are supported, got {}", p, type ? type->dump() : "none");
    const ordered_json* text = field(part, "text");
    DSV4_CHECK(!text || text->is_string(), "{}.text must be a string, got {}", p, text ? text->type_name() : "");
    if (i > 0) out += "\n\n";
    if (text) out += text->get_ref<const std::string&>();
  }
  return out;
}

// A tool result may be a list of blocks: text ones are kept, others become "[Unsupported TYPE]".
void check_tool_content_blocks(const ordered_json& blocks, const std::string& path) {
  for (size_t i = 0; i < blocks.size(); ++i) {
    const std::string p = fmt::format("{}[{}]", path, i);
    DSV4_CHECK(blocks[i].is_object(), "{} must be an object, got {}", p, blocks[i].type_name());
    const ordered_json* type = field(blocks[i], "type");
    if (type && *type == "text") check_optional_string(blocks[i], "text", p);
  }
}

void check_content(ordered_json& msg, const std::string& role, const std::string& path) {
  if (const ordered_json* parts = field(msg, "content"); parts && parts->is_array()) {
    if (role == "tool") {
      check_tool_content_blocks(*parts, path + ".content");
    } else {
      std::string text = flatten_text_parts(*parts, path + ".content");
      msg["content"] = std::move(text);
    }
  } else {
    check_optional_string(msg, "content", path);
  }
  const ordered_json* content = field(msg, "content");
  if (role == "developer") {
    DSV4_CHECK(content && !content->get_ref<const std::string&>().empty(),
               "{}.content: a developer message needs non-empty content", path);
  }
  if (role == "latest_reminder") DSV4_CHECK(content, "{}.content: a latest_reminder message needs content", path);
}

void check_tools(const ordered_json& msg, const std::string& path) {
  const ordered_json* tools = field(msg, "tools");
  if (!tools) return;
  DSV4_CHECK(tools->is_array(), "{}.tools must be an array, got {}", path, tools->type_name());
  for (size_t i = 0; i < tools->size(); ++i) {
    const ordered_json& tool = (*tools)[i];
    DSV4_CHECK(tool.is_object(), "{}.tools[{}] must be an object, got {}", path, i, tool.type_name());
    const ordered_json* function = field(tool, "function");
    DSV4_CHECK(function && function->is_object(),
               "{}.tools[{}].function must be an object (tools use the OpenAI format {{\"type\": \"function\", "
               "\"function\": {{...}}}})",
               path, i);
  }
}

void check_tool_calls(const ordered_json& msg, const std::string& path) {
  const ordered_json* calls = field(msg, "tool_calls");
  if (!calls) return;
  DSV4_CHECK(calls->is_array(), "{}.tool_calls must be an array, got {}", path, calls->type_name());
  for (size_t i = 0; i < calls->size(); ++i) {
    const std::string p = fmt::format("{}.tool_calls[{}]", path, i);
    const ordered_json& call = (*calls)[i];
    DSV4_CHECK(call.is_object(), "{} must be an object, got {}", p, call.type_name());
    check_optional_string(call, "id", p);
    const ordered_json* function = field(call, "function");
    DSV4_CHECK(function && function->is_object(), "{}.function must be an object", p);
    const ordered_json* name = field(*function, "name");
    DSV4_CHECK(name && name->is_string(), "{}.function.name must be a string", p);
    const ordered_json* args = field(*function, "arguments");
    DSV4_CHECK(args && (args->is_string() || args->is_object()),
               "{}.function.arguments must be a JSON string (or an object), got {}", p,
               args ? args->type_name() : "none");
  }
}

void check_task(const ordered_json& msg, const std::string& path) {
  const ordered_json* task = field(msg, "task");
  if (!task) return;
  DSV4_CHECK(task->is_string() && contains(kTasks, task->get<std::string>()),
             "{}.task: invalid task {} (expected action, query, authority, domain, title or read_url)", path,
             task->dump());
}

void check_message(ordered_json& msg, const std::string& path) {
  DSV4_CHECK(msg.is_object(), "{} must be an object, got {}", path, msg.type_name());
  const ordered_json* role = field(msg, "role");
  DSV4_CHECK(role, "{}: missing \"role\"", path);
  DSV4_CHECK(role->is_string(), "{}.role must be a string, got {}", path, role->type_name());
  const std::string r = role->get<std::string>();
  DSV4_CHECK(contains(kRoles, r),
             "{}.role: unknown role \"{}\" (expected system, developer, user, assistant, tool or latest_reminder)",
             path, r);
  check_content(msg, r, path);
  check_optional_string(msg, "reasoning_content", path);
  check_optional_string(msg, "tool_call_id", path);
  check_tools(msg, path);
  check_tool_calls(msg, path);
  check_task(msg, path);
  const ordered_json* wo_eos = field(msg, "wo_eos");
  DSV4_CHECK(!wo_eos || wo_eos->is_boolean(), "{}.wo_eos must be a boolean, got {}", path,
             wo_eos ? wo_eos->type_name() : "");
}

}  // namespace

ordered_json check_messages(const ordered_json& messages, std::string_view what) {
  DSV4_CHECK(messages.is_array(), "{} must be a JSON array of messages, got {}", what, messages.type_name());
  ordered_json out = messages;
  for (size_t i = 0; i < out.size(); ++i) check_message(out[i], fmt::format("{}[{}]", what, i));
  return out;
}

}  // namespace dsv4::chat
