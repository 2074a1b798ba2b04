#include "server/chat_translation.h"

#include <fmt/format.h>

#include <algorithm>

#include "server/api_error.h"

namespace dsv4::server {

std::string string_field(const Json& o, const char* key, const std::string& at) {
  const auto it = o.find(key);
  if (it == o.end() || !it->is_string()) bad_request(at + "." + key, "'{}.{}' must be a string", at, key);
  return it->get<std::string>();
}

Json pass_through(const Json& body, std::span<const std::string_view> consumed,
                  std::span<const std::string_view> chat_only, std::string_view api) {
  const RequestFields f(body);
  for (const std::string_view key : chat_only) {
    if (f.has(key)) bad_request(std::string(key), "'{}' is a chat completions field; see the {}'s", key, api);
  }
  Json chat = Json::object();
  for (auto it = body.begin(); it != body.end(); ++it) {
    if (std::find(consumed.begin(), consumed.end(), it.key()) == consumed.end()) chat[it.key()] = it.value();
  }
  return chat;
}

Json chat_tools(const Json& tools, std::string_view type, std::string_view default_type,
                const std::function<Json(const Json& tool, const std::string& at)>& function_of) {
  if (!tools.is_array()) bad_request("tools", "'tools' must be a list");
  Json out = Json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& t = tools[i];
    const std::string at = fmt::format("tools[{}]", i);
    if (!t.is_object()) bad_request(at, "'{}' must be an object", at);
    const std::string got = t.value("type", std::string(default_type));
    if (got != type) not_supported(at + ".type", fmt::format("'{}' tools ({} tools only)", got, type));
    out.push_back(Json{{"type", "function"}, {"function", function_of(t, at)}});
  }
  return out;
}

Json named_tool_choice(const std::string& name) { return Json{{"type", "function"}, {"function", {{"name", name}}}}; }

}  // namespace dsv4::server
