#include "tokenizer/pre_tokenizer.h"

#include <fmt/format.h>

#include "core/error.h"
#include "tokenizer/json_fields.h"

namespace dsv4 {
namespace {

using nlohmann::json;
namespace jf = json_fields;

// The regex of HF's ByteLevel pre-tokenizer when use_regex is true (GPT-2's).
constexpr std::string_view kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

SplitRegex split_step(const json& spec, const std::string& where) {
  const std::string behavior = jf::get_string(spec, "behavior", where);
  if (behavior != "Isolated") fail("{} has behavior {:?}; only \"Isolated\" is implemented", where, behavior);
  if (jf::get_bool(spec, "invert", where, false)) fail("{} is inverted; not implemented", where);
  const auto it = spec.find("pattern");
  if (it == spec.end() || !it->is_object()) fail("{}.pattern must be an object", where);
  if (it->contains("Regex")) return SplitRegex::regex(jf::get_string(*it, "Regex", where + ".pattern"));
  if (it->contains("String")) return SplitRegex::literal(jf::get_string(*it, "String", where + ".pattern"));
  fail("{}.pattern must hold \"Regex\" or \"String\"", where);
}

}  // namespace

PreTokenizer PreTokenizer::from_json(const json& spec) {
  const std::string type = jf::type_of(spec, "pre_tokenizer");
  std::vector<const json*> steps;
  if (type == "Sequence") {
    const auto it = spec.find("pretokenizers");
    if (it == spec.end() || !it->is_array()) fail("pre_tokenizer.pretokenizers must be an array");
    for (const json& s : *it) steps.push_back(&s);
  } else {
    steps.push_back(&spec);
  }
  PreTokenizer pre;
  bool byte_level = false;
  for (size_t i = 0; i < steps.size(); ++i) {
    const std::string where = type == "Sequence" ? fmt::format("pre_tokenizer.pretokenizers[{}]", i) : "pre_tokenizer";
    const std::string step_type = jf::type_of(*steps[i], where);
    if (byte_level) fail("{} ({}) follows ByteLevel; ByteLevel must come last", where, step_type);
    if (step_type == "Split") {
      pre.steps_.push_back(split_step(*steps[i], where));
    } else if (step_type == "ByteLevel") {
      byte_level = true;
      pre.byte_level_step_ = pre.steps_.size();
      pre.add_prefix_space_ = jf::get_bool(*steps[i], "add_prefix_space", where, true);
      if (jf::get_bool(*steps[i], "use_regex", where, true)) pre.steps_.push_back(SplitRegex::regex(kGpt2Regex));
    } else {
      fail("{} has type {:?}; implemented pre-tokenizers: Sequence, Split, ByteLevel", where, step_type);
    }
  }
  if (!byte_level) fail("pre_tokenizer has no ByteLevel step; only byte-level BPE is implemented");
  return pre;
}

}  // namespace dsv4
