// What the other APIs' requests share on their way to the chat request they stand for
// (responses_request.h, messages_request.h): typed fields named by their place, the chat body that keeps
// every field the translation does not consume, the chat-only fields they must not send, and tools.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "server/request_fields.h"

namespace dsv4::server {

// o[key] as a string, else a 400 naming `at.key`.
std::string string_field(const Json& o, const char* key, const std::string& at);

// A chat body holding the fields of `body` other than `consumed` (seed, top_k, ... as vLLM's extensions);
// a 400 for a field of `chat_only` (chat fields the translation sets itself), saying which API's to use.
Json pass_through(const Json& body, std::span<const std::string_view> consumed,
                  std::span<const std::string_view> chat_only, std::string_view api);

// `tools` (a list) as chat function tools: tool i (an object at "tools[i]") of `type` (`default_type` when
// it names none; any other is refused as not supported) becomes {"type": "function", "function":
// function_of(tool, at)}.
Json chat_tools(const Json& tools, std::string_view type, std::string_view default_type,
                const std::function<Json(const Json& tool, const std::string& at)>& function_of);

// {"type": "function", "function": {"name": name}}: a named tool_choice.
Json named_tool_choice(const std::string& name);

}  // namespace dsv4::server
