// A byte-level BPE tokenizer loaded from a Hugging Face tokenizer.json (the DeepSeek-V3/V4 family), giving
// the ids HF tokenizers gives with add_special_tokens=False: added/special tokens written in the text are
// matched as tokens, and none is ever added implicitly.
//
// Input text that is not valid UTF-8 is repaired first: each maximal invalid subsequence becomes U+FFFD
// (as Python's bytes.decode(errors="replace")). Decoding joins the tokens' bytes and repairs the result the
// same way (as HF's decode). Thread-safe after loading; bad input throws dsv4::Error, never crashes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/pre_tokenizer.h"

namespace dsv4 {

class Tokenizer {
 public:
  static Tokenizer load(const std::filesystem::path& tokenizer_json);
  // `origin` names the source in error messages.
  static Tokenizer from_json_text(std::string_view json_text, std::string_view origin = "tokenizer.json");

  std::vector<int32_t> encode(std::string_view text) const;
  void encode(std::string_view text, std::vector<int32_t>& out) const;  // appends to out

  // Text of the ids; special tokens (special=true in the file) are left out when skip_special.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;
  // The bytes one token decodes to: may be part of a UTF-8 sequence (see Detokenizer).
  std::string_view token_bytes(int32_t id) const;

  // max id + 1 over the vocab and the added tokens (not their sum: V4 has added tokens inside the vocab).
  int32_t vocab_size() const { return static_cast<int32_t>(token_text_.size()); }
  // A token as the file spells it (byte-level text for vocab entries, content for added tokens).
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::string_view id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;
  const std::vector<AddedToken>& added_tokens() const { return added_.tokens(); }

 private:
  Tokenizer(PreTokenizer pre, BpeModel bpe, AddedVocabulary added);
  void index_tokens();
  void check_id(int32_t id) const;

  PreTokenizer pre_;
  BpeModel bpe_;
  AddedVocabulary added_;
  std::vector<std::string> token_text_;  // by id; empty for ids that no token has
  std::vector<uint32_t> bytes_offset_;   // decoded bytes of id i: bytes_[offset[i], offset[i + 1])
  std::string bytes_;
  std::vector<uint8_t> flags_;  // kAssigned | kSpecial, by id
};

}  // namespace dsv4
