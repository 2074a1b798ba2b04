// One Split step of a pre-tokenizer: a PCRE2 regex (UTF, UCP, JIT) applied with HF tokenizers' "Isolated"
// behaviour: the matches and the gaps between them all become pieces, in order; empty pieces are dropped.
// Thread-safe: match state lives per thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/utf8.h"

struct pcre2_real_code_8;

namespace dsv4 {

class SplitRegex {
 public:
  // A regex as tokenizer.json writes it (Oniguruma syntax, translated by oniguruma_to_pcre2).
  static SplitRegex regex(std::string_view oniguruma_pattern);
  // A literal string (tokenizer.json's {"String": ...} form).
  static SplitRegex literal(std::string_view text);
  // A PCRE2 pattern used as is (UTF, UCP).
  static SplitRegex native(std::string_view pcre2_pattern);

  SplitRegex(SplitRegex&& other) noexcept;
  SplitRegex& operator=(SplitRegex&& other) noexcept;
  SplitRegex(const SplitRegex&) = delete;
  SplitRegex& operator=(const SplitRegex&) = delete;
  ~SplitRegex();

  // Calls emit(std::string_view) for each piece of text (valid UTF-8).
  template <typename Emit>
  void split(std::string_view text, Emit&& emit) const;

  // The first match in subject that starts at or after `from`; false when there is none.
  bool find(std::string_view subject, size_t from, size_t& begin, size_t& end) const;

  const std::string& pattern() const { return pattern_; }

 private:
  SplitRegex(std::string pattern, uint32_t options);

  std::string pattern_;  // as compiled
  pcre2_real_code_8* code_ = nullptr;
  bool jit_ = false;
};

template <typename Emit>
void SplitRegex::split(std::string_view text, Emit&& emit) const {
  size_t prev = 0, pos = 0, begin = 0, end = 0;
  size_t last_match_end = std::string_view::npos;
  while (pos <= text.size() && find(text, pos, begin, end)) {
    if (begin == end && end == last_match_end) {  // as Oniguruma's iterator: no empty match right after one
      if (pos >= text.size()) break;
      pos += utf8::char_length(static_cast<unsigned char>(text[pos]));
      continue;
    }
    if (begin > prev) emit(text.substr(prev, begin - prev));
    if (end > begin) emit(text.substr(begin, end - begin));
    prev = pos = last_match_end = end;
  }
  if (prev < text.size()) emit(text.substr(prev));
}

}  // namespace dsv4
