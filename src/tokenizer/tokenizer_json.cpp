// Tokenizer::load: reads tokenizer.json, refusing the component shapes this engine does not implement.
#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/utf8.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/tokenizer.h"

namespace dsv4 {
namespace {

using nlohmann::json;
namespace jf = json_fields;

// A top-level component by reference (json::value would copy the whole vocabulary), null when absent.
const json& member(const json& root, const char* key) {
  static const json null;
  const auto it = root.find(key);
  return it == root.end() ? null : *it;
}

void check_normalizer(const json& spec) {
  const std::string type = jf::type_of(spec, "normalizer");
  if (type == "null") return;
  const auto it = spec.find("normalizers");
  if (type == "Sequence" && it != spec.end() && it->is_array() && it->empty()) return;
  fail("normalizer {:?} is not implemented (only none or an empty Sequence)", type);
}

void check_decoder(const json& spec) {
  const std::string type = jf::type_of(spec, "decoder");
  if (type != "ByteLevel") fail("decoder {:?} is not implemented (only ByteLevel)", type);
}

// truncation and padding change what encode returns; the post_processor only acts when special tokens are
// added implicitly, which this engine never does.
void check_unused(const json& root) {
  for (const char* key : {"truncation", "padding"})
    if (root.contains(key) && !root[key].is_null()) fail("{} is set; it is not implemented", key);
}

std::vector<AddedToken> parse_added_tokens(const json& root) {
  std::vector<AddedToken> out;
  const auto it = root.find("added_tokens");
  if (it == root.end() || it->is_null()) return out;
  if (!it->is_array()) fail("added_tokens must be an array");
  for (size_t i = 0; i < it->size(); ++i) {
    const json& t = (*it)[i];
    const std::string where = fmt::format("added_tokens[{}]", i);
    if (!t.is_object()) fail("{} must be an object", where);
    AddedToken a;
    a.content = jf::get_string(t, "content", where);
    const auto id = t.find("id");
    if (id == t.end() || !id->is_number_integer() || id->get<int64_t>() < 0 || id->get<int64_t>() >= (1 << 24))
      fail("{}.id must be an integer in [0, 2^24)", where);
    a.id = id->get<int32_t>();
    a.special = jf::get_bool(t, "special", where, false);
    a.single_word = jf::get_bool(t, "single_word", where, false);
    a.lstrip = jf::get_bool(t, "lstrip", where, false);
    a.rstrip = jf::get_bool(t, "rstrip", where, false);
    a.normalized = jf::get_bool(t, "normalized", where, !a.special);
    if (a.content.empty()) continue;  // HF ignores empty added tokens
    if (!utf8::is_valid(a.content)) fail("{}.content is not valid UTF-8", where);
    for (const AddedToken& b : out)
      if (b.content == a.content || b.id == a.id)
        fail("added tokens {:?} (id {}) and {:?} (id {}) clash", b.content, b.id, a.content, a.id);
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace

Tokenizer::Tokenizer(PreTokenizer pre, BpeModel bpe, AddedVocabulary added)
    : pre_(std::move(pre)), bpe_(std::move(bpe)), added_(std::move(added)) {
  index_tokens();
}

Tokenizer Tokenizer::load(const std::filesystem::path& tokenizer_json) {
  std::ifstream in(tokenizer_json, std::ios::binary);
  if (!in) fail("cannot read tokenizer file {}", tokenizer_json.string());
  std::ostringstream text;
  text << in.rdbuf();
  return from_json_text(text.str(), tokenizer_json.string());
}

Tokenizer Tokenizer::from_json_text(std::string_view json_text, std::string_view origin) {
  const json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) fail("{}: not a JSON object (is it a tokenizer.json?)", origin);
  try {
    check_normalizer(member(root, "normalizer"));
    check_decoder(member(root, "decoder"));
    check_unused(root);
    return Tokenizer(PreTokenizer::from_json(member(root, "pre_tokenizer")), BpeModel::from_json(member(root, "model")),
                     AddedVocabulary(parse_added_tokens(root)));
  } catch (const Error& e) {
    fail("{}: {}", origin, e.what());
  }
}

// Id tables: the file's text of each token and the bytes it decodes to; added tokens win over the vocab.
void Tokenizer::index_tokens() {
  int32_t max_id = -1;
  for (const auto& [text, id] : bpe_.vocab()) max_id = std::max(max_id, id);
  for (const AddedToken& t : added_.tokens()) max_id = std::max(max_id, t.id);
  token_text_.assign(static_cast<size_t>(max_id) + 1, std::string());
  flags_.assign(token_text_.size(), 0);
  for (const auto& [text, id] : bpe_.vocab()) {
    if (flags_[id] & 1) fail("vocab id {} is used by both {:?} and {:?}", id, token_text_[id], text);
    token_text_[id] = text;
    flags_[id] = 1;
  }
  for (const AddedToken& t : added_.tokens()) {
    token_text_[t.id] = t.content;
    flags_[t.id] = static_cast<uint8_t>(1 | (t.special ? 2 : 0));
  }
  bytes_offset_.assign(token_text_.size() + 1, 0);
  for (size_t id = 0; id < token_text_.size(); ++id) {
    if (!utf8::is_valid(token_text_[id])) fail("token {} is not valid UTF-8", id);
    bytes_.append(byte_level::decode_token(token_text_[id]));
    bytes_offset_[id + 1] = static_cast<uint32_t>(bytes_.size());
  }
}

}  // namespace dsv4
