#include "tokenizer/detokenizer.h"

#include "core/utf8.h"

namespace dsv4 {

void Detokenizer::push(int32_t id, std::string& out) {
  const std::string_view bytes = tokenizer_->token_bytes(id);
  if (skip_special_ && tokenizer_->is_special(id)) return;
  pending_.append(bytes);
  const size_t used = utf8::append_complete(pending_, out);
  pending_.erase(0, used);
}

std::string Detokenizer::push(int32_t id) {
  std::string out;
  push(id, out);
  return out;
}

void Detokenizer::finish(std::string& out) {
  utf8::append_lossy(pending_, out);
  pending_.clear();
}

std::string Detokenizer::finish() {
  std::string out;
  finish(out);
  return out;
}

}  // namespace dsv4
