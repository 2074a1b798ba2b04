#include "tokenizer/tokenizer.h"

#include "core/error.h"
#include "core/utf8.h"
#include "tokenizer/byte_level.h"

namespace dsv4 {

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  encode(text, out);
  return out;
}

void Tokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
  std::string repaired;
  if (!utf8::is_valid(text)) {
    repaired = utf8::lossy(text);
    text = repaired;
  }
  out.reserve(out.size() + text.size() / 3);
  const auto on_piece = [&](std::string_view piece) { bpe_.encode_piece(piece, out); };
  added_.split(
      text, [&](std::string_view gap) { pre_.split(gap, on_piece); }, [&](int32_t id) { out.push_back(id); });
}

void Tokenizer::check_id(int32_t id) const {
  if (id < 0 || id >= vocab_size()) fail("token id {} is out of range [0, {})", id, vocab_size());
  if (!(flags_[id] & 1)) fail("token id {} is not assigned to any token", id);
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  check_id(id);
  return std::string_view(bytes_).substr(bytes_offset_[id], bytes_offset_[id + 1] - bytes_offset_[id]);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string raw;
  raw.reserve(ids.size() * 4);
  for (const int32_t id : ids) {
    const std::string_view bytes = token_bytes(id);
    if (!(skip_special && (flags_[id] & 2))) raw.append(bytes);
  }
  if (utf8::is_valid(raw)) return raw;
  return utf8::lossy(raw);
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  for (const AddedToken& t : added_.tokens())
    if (t.content == token) return t.id;
  const auto it = bpe_.vocab().find(std::string(token));
  if (it == bpe_.vocab().end()) return std::nullopt;
  return it->second;
}

std::string_view Tokenizer::id_to_token(int32_t id) const {
  check_id(id);
  return token_text_[id];
}

bool Tokenizer::is_special(int32_t id) const {
  check_id(id);
  return flags_[id] & 2;
}

}  // namespace dsv4
