// --hf-overrides JSON (vLLM's name): a JSON object merged over config.json's before it is parsed, keys
// as config.json spells them, nested objects merged key by key. A smaller num_hidden_layers (or
// num_nextn_predict_layers) keeps the first main layers' compress_ratios and the MTP entries after
// them (compress_ratios lists the main layers, then the MTP ones), and num_hash_layers at most the
// layers kept, unless the overrides set those keys too.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace dsv4 {

// Parses the flag's text: an empty text is no overrides (an empty object); anything but a JSON object
// is a dsv4::Error.
nlohmann::json parse_hf_overrides(const std::string& text);

// config.json's object with `overrides` merged over it. A value whose JSON type differs from the one it
// replaces (a string for a number, a fraction for an integer, ...) is a dsv4::Error naming the key.
nlohmann::json apply_hf_overrides(const nlohmann::json& config, const nlohmann::json& overrides);

// The top-level keys of config.json whose values differ between `base` and `overridden` (what the
// overrides changed, derived keys such as compress_ratios included), sorted.
std::vector<std::string> changed_keys(const nlohmann::json& base, const nlohmann::json& overridden);

}  // namespace dsv4
