// JSON text exactly as Python's json.dumps(value, ensure_ascii=False) writes it with its default
// separators (", " and ": "), which is what the official V4 encoder embeds in prompts: tool
// schemas, response formats and non-string tool-call arguments. nlohmann's dump() differs
// (compact separators, its own float format), so the encoder needs this one.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace dsv4::chat {

// Keys keep insertion order; floats are written like Python's repr (shortest round-trip digits,
// "1.0", "1e+16", "1e-05", NaN/Infinity); only '"', '\\' and control characters are escaped.
// Bytes that are not well-formed UTF-8 (which Python strings cannot hold) are written as U+FFFD.
std::string python_json_dumps(const nlohmann::ordered_json& value);

// A string as a JSON string literal, escaped the same way.
std::string python_json_quote(std::string_view s);

// A double as Python's repr(float) writes it.
std::string python_float_repr(double x);

}  // namespace dsv4::chat
