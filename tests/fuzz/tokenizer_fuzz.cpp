// libFuzzer target for the tokenizer: arbitrary bytes (invalid UTF-8 included) through encode, decode and the
// streaming detokenizer, and the same bytes read as token ids through decode. Invariants: decode(encode(x))
// is x with invalid UTF-8 replaced by U+FFFD; streaming equals decode; bad ids throw dsv4::Error, never crash.
// Uses DSV4_TOKENIZER, else the embedded tokenizer (tokenizer_locator.h).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/utf8.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_locator.h"

namespace {

const dsv4::Tokenizer& tokenizer() {
  static const dsv4::Tokenizer tok =
      dsv4::Tokenizer::load(dsv4::locate_tokenizer(dsv4::TokenizerSearch::from_environment()));
  return tok;
}

void check(bool ok) {
  if (!ok) __builtin_trap();
}

void fuzz_text(const dsv4::Tokenizer& tok, std::string_view text) {
  const std::vector<int32_t> ids = tok.encode(text);
  const std::string back = tok.decode(ids);
  check(back == dsv4::utf8::lossy(text));
  dsv4::Detokenizer stream(tok);
  std::string streamed;
  for (const int32_t id : ids) stream.push(id, streamed);
  stream.finish(streamed);
  check(streamed == back);
}

void fuzz_ids(const dsv4::Tokenizer& tok, const uint8_t* data, size_t size) {
  std::vector<int32_t> ids(size / sizeof(int32_t));
  if (!ids.empty()) std::memcpy(ids.data(), data, ids.size() * sizeof(int32_t));
  try {
    tok.decode(ids);
  } catch (const dsv4::Error&) {  // out-of-range ids are refused
  }
  for (int32_t& id : ids) id = static_cast<int32_t>(static_cast<uint32_t>(id) % tok.vocab_size());
  check(dsv4::utf8::is_valid(tok.decode(ids)));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const dsv4::Tokenizer& tok = tokenizer();
  fuzz_text(tok, std::string_view(reinterpret_cast<const char*>(data), size));
  fuzz_ids(tok, data, size);
  return 0;
}
