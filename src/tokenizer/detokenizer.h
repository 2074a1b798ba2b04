// Incremental detokenization for an output stream: push one token id at a time and get the text that is
// now final. A token may end inside a UTF-8 sequence; those bytes are held back until the sequence completes
// (or proves invalid, when it becomes U+FFFD), so the stream never carries a broken character and the
// concatenation of all pieces plus finish() equals Tokenizer::decode of all ids.
#pragma once

#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace dsv4 {

class Detokenizer {
 public:
  explicit Detokenizer(const Tokenizer& tokenizer, bool skip_special = false)
      : tokenizer_(&tokenizer), skip_special_(skip_special) {}

  // Appends the text that id completes to out (often nothing new for a partial character).
  void push(int32_t id, std::string& out);
  std::string push(int32_t id);
  // Appends what is still held (an incomplete sequence becomes U+FFFD) and resets the stream.
  void finish(std::string& out);
  std::string finish();

  // Bytes held back (0 to 3).
  size_t pending() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace dsv4
