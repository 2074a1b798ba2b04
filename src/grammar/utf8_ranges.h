// Sets of Unicode scalar values as the UTF-8 byte sequences that spell them, so that grammars over
// bytes accept exactly the well-formed encodings of a character class (never a surrogate, an overlong
// form or a stray continuation byte): the output of a constrained row always decodes cleanly.
#pragma once

#include <utility>
#include <vector>

#include "grammar/grammar.h"

namespace dsv4::grammar {

inline constexpr char32_t kMaxCodepoint = 0x10FFFF;

// Sorted, disjoint, non-adjacent closed ranges of code points.
class CodepointSet {
 public:
  CodepointSet() = default;
  static CodepointSet range(char32_t lo, char32_t hi);
  static CodepointSet all() { return range(0, kMaxCodepoint); }

  void add(char32_t lo, char32_t hi);
  void add(const CodepointSet& other);
  CodepointSet complement() const;
  CodepointSet minus(const CodepointSet& other) const;
  bool empty() const { return ranges_.empty(); }
  bool contains(char32_t c) const;
  const std::vector<std::pair<char32_t, char32_t>>& ranges() const { return ranges_; }

 private:
  std::vector<std::pair<char32_t, char32_t>> ranges_;
};

// One character of the set, as UTF-8 (surrogates are never matched).
ExprId utf8_chars(Grammar& g, const CodepointSet& set);

// The UTF-8 bytes of one code point.
std::string utf8_encode(char32_t c);

}  // namespace dsv4::grammar
