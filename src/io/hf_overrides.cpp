#include "io/hf_overrides.h"

#include <algorithm>

#include "core/error.h"

namespace dsv4 {
namespace {

using json = nlohmann::json;

const char* type_name(const json& v) {
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  return v.type_name();
}

// An integer may stand where a number is; otherwise the kinds must match (null replaces anything).
bool same_kind(const json& was, const json& now) {
  if (was.is_null() || now.is_null()) return true;
  if (was.is_number_integer()) return now.is_number_integer();
  if (was.is_number()) return now.is_number();
  return was.type() == now.type();
}

void merge(json& into, const json& over, const std::string& path) {
  for (const auto& [key, value] : over.items()) {
    const std::string where = path.empty() ? key : path + "." + key;
    if (!into.contains(key)) {
      into[key] = value;
      continue;
    }
    json& was = into[key];
    DSV4_CHECK(same_kind(was, value), "--hf-overrides: \"{}\" must be {} as in config.json ({}), got {}", where,
               type_name(was), was.dump(), value.dump());
    if (value.is_object())
      merge(was, value, where);
    else
      was = value;
  }
}

int64_t int_or(const json& j, const char* key, int64_t otherwise) {
  return j.contains(key) && j[key].is_number_integer() ? j[key].get<int64_t>() : otherwise;
}

// compress_ratios lists num_hidden_layers main entries, then num_nextn_predict_layers MTP entries: fewer
// layers keep the first ones of each part.
void truncate_layers(json& merged, const json& base, const json& over) {
  if (over.contains("compress_ratios") || !base.contains("compress_ratios") || !base["compress_ratios"].is_array())
    return;
  const json& ratios = base["compress_ratios"];
  const int64_t layers = int_or(base, "num_hidden_layers", -1), mtp = int_or(base, "num_nextn_predict_layers", 0);
  const int64_t keep_layers = int_or(merged, "num_hidden_layers", layers);
  const int64_t keep_mtp = int_or(merged, "num_nextn_predict_layers", mtp);
  if (keep_layers == layers && keep_mtp == mtp) return;
  DSV4_CHECK(layers >= 0 && static_cast<int64_t>(ratios.size()) == layers + mtp,
             "--hf-overrides: config.json's compress_ratios has {} entries, not num_hidden_layers + "
             "num_nextn_predict_layers = {}, so it cannot be cut to fewer layers",
             ratios.size(), layers + mtp);
  DSV4_CHECK(keep_layers >= 1 && keep_layers <= layers && keep_mtp >= 0 && keep_mtp <= mtp,
             "--hf-overrides: num_hidden_layers {} and num_nextn_predict_layers {} must lie in [1, {}] and [0, {}] "
             "(config.json's; more layers need their compress_ratios in the overrides)",
             keep_layers, keep_mtp, layers, mtp);
  json cut = json::array();
  for (int64_t i = 0; i < keep_layers; ++i) cut.push_back(ratios[static_cast<size_t>(i)]);
  for (int64_t i = 0; i < keep_mtp; ++i) cut.push_back(ratios[static_cast<size_t>(layers + i)]);
  merged["compress_ratios"] = cut;
  if (!over.contains("num_hash_layers") && merged.contains("num_hash_layers"))
    merged["num_hash_layers"] = std::min(int_or(merged, "num_hash_layers", 0), keep_layers);
}

}  // namespace

json parse_hf_overrides(const std::string& text) {
  if (text.empty()) return json::object();
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  DSV4_CHECK(!j.is_discarded(), "--hf-overrides: not valid JSON: {}", text);
  DSV4_CHECK(j.is_object(), "--hf-overrides: expected a JSON object such as '{{\"num_hidden_layers\": 2}}', got {}",
             text);
  return j;
}

json apply_hf_overrides(const json& config, const json& overrides) {
  DSV4_CHECK(overrides.is_object(), "--hf-overrides: expected a JSON object, got {}", overrides.dump());
  json merged = config;
  merge(merged, overrides, "");
  truncate_layers(merged, config, overrides);
  return merged;
}

std::vector<std::string> changed_keys(const json& base, const json& overridden) {
  std::vector<std::string> keys;
  for (const auto& [key, value] : overridden.items())
    if (!base.contains(key) || base[key] != value) keys.push_back(key);
  std::sort(keys.begin(), keys.end());
  return keys;
}

}  // namespace dsv4
