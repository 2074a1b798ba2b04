// Typed reads of tokenizer.json fields; a missing or mistyped field is a dsv4::Error naming its path.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace dsv4::json_fields {

using nlohmann::json;

// The "type" of a tokenizer.json component (null when the component is null).
std::string type_of(const json& component, std::string_view where);
std::string get_string(const json& obj, const char* key, std::string_view where);
// A bool, `fallback` when the key is absent or null.
bool get_bool(const json& obj, const char* key, std::string_view where, bool fallback);
// True when the key is absent, null, or an empty string (e.g. BPE's "continuing_subword_prefix").
bool absent_or_empty(const json& obj, const char* key);

}  // namespace dsv4::json_fields
