// Server-sent events as OpenAI streams them: one `data: {json}` event per chunk, a final `data: [DONE]`,
// and comment lines as keep-alive pings (clients and proxies ignore them).
#pragma once

#include <string>
#include <string_view>

#include "server/request_fields.h"

namespace dsv4::server {

inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";
inline constexpr std::string_view kSsePing = ": ping\n\n";

// "data: <json>\n\n"; invalid UTF-8 (never expected: the detokenizer repairs it) becomes U+FFFD.
std::string sse_event(const Json& data);
// "event: <data.type>\n" then the same (the Responses and Messages APIs' named events); `data` without a
// string "type" goes unnamed.
std::string named_sse_event(const Json& data);

// Compact JSON with invalid UTF-8 replaced, for response bodies.
std::string dump_json(const Json& j);

}  // namespace dsv4::server
