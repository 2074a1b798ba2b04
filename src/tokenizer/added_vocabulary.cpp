#include "tokenizer/added_vocabulary.h"

#include <algorithm>
#include <map>

#include "core/utf8.h"
#include "tokenizer/split_regex.h"

namespace dsv4 {
namespace {

// Unicode White_Space: what Rust's regex \s matches (HF's lstrip and rstrip strip it).
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Rust's regex \w (Unicode TR18 word characters): HF's test whether a single_word token touches a word.
bool is_word_char(std::string_view ch) {
  static const SplitRegex word = SplitRegex::native(R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}])");
  size_t begin = 0, end = 0;
  return word.find(ch, 0, begin, end) && begin == 0;
}

std::vector<const AddedToken*> select(const std::vector<AddedToken>& tokens, bool normalized) {
  std::vector<const AddedToken*> out;
  for (const AddedToken& t : tokens)
    if (t.normalized == normalized && !t.content.empty()) out.push_back(&t);
  return out;
}

}  // namespace

TokenTrie::TokenTrie(const std::vector<const AddedToken*>& tokens) : tokens_(tokens) {
  root_.fill(-1);
  std::vector<std::map<uint8_t, int32_t>> children;
  std::vector<int32_t> ends;
  const auto add_node = [&] {
    children.emplace_back();
    ends.push_back(-1);
    return static_cast<int32_t>(ends.size() - 1);
  };
  const int32_t root = add_node();
  for (size_t t = 0; t < tokens_.size(); ++t) {
    int32_t node = root;
    for (const char c : tokens_[t]->content) {
      const auto b = static_cast<uint8_t>(c);
      auto it = children[node].find(b);
      if (it == children[node].end()) {
        const int32_t fresh = add_node();
        it = children[node].emplace(b, fresh).first;
      }
      node = it->second;
    }
    ends[node] = static_cast<int32_t>(t);  // a later duplicate replaces an earlier one
  }
  nodes_.resize(ends.size());
  for (size_t n = 0; n < ends.size(); ++n) {
    nodes_[n] = Node{ends[n], static_cast<uint32_t>(edges_.size()), static_cast<uint32_t>(children[n].size())};
    for (const auto& [b, child] : children[n]) edges_.push_back({b, child});
  }
  for (const auto& [b, child] : children[root]) root_[b] = child;
}

int32_t TokenTrie::child(const Node& n, uint8_t b) const {
  const auto first = edges_.begin() + n.first_edge;
  const auto last = first + n.edge_count;
  const auto it = std::lower_bound(first, last, b, [](const Edge& e, uint8_t v) { return e.byte < v; });
  return it != last && it->byte == b ? it->node : -1;
}

bool TokenTrie::find(std::string_view text, size_t from, size_t& begin, size_t& end, const AddedToken*& token) const {
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  for (size_t i = from; i < text.size(); ++i) {
    int32_t node = root_[p[i]];
    int32_t best = -1;
    size_t best_end = 0;
    for (size_t j = i + 1; node >= 0; ++j) {
      if (nodes_[node].token >= 0) best = nodes_[node].token, best_end = j;
      if (j == text.size()) break;
      node = child(nodes_[node], p[j]);
    }
    if (best >= 0) {
      begin = i;
      end = best_end;
      token = tokens_[best];
      return true;
    }
  }
  return false;
}

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens)
    : tokens_(std::move(tokens)), raw_(select(tokens_, false)), normalized_(select(tokens_, true)) {}

// The tries point into tokens_, whose heap buffer moves along with the vector.
AddedVocabulary::AddedVocabulary(AddedVocabulary&& other) noexcept
    : tokens_(std::move(other.tokens_)), raw_(std::move(other.raw_)), normalized_(std::move(other.normalized_)) {}

bool AddedVocabulary::single_word_at(std::string_view text, size_t begin, size_t end) {
  if (begin > 0) {
    size_t i = begin;
    utf8::prev_codepoint(text, i);
    if (is_word_char(text.substr(i, begin - i))) return false;
  }
  if (end < text.size()) {
    const size_t len = utf8::char_length(static_cast<unsigned char>(text[end]));
    if (is_word_char(text.substr(end, len))) return false;
  }
  return true;
}

size_t AddedVocabulary::spaces_before(std::string_view text, size_t pos) {
  while (pos > 0) {
    size_t i = pos;
    if (!is_white_space(utf8::prev_codepoint(text, i))) break;
    pos = i;
  }
  return pos;
}

size_t AddedVocabulary::spaces_after(std::string_view text, size_t pos) {
  while (pos < text.size()) {
    size_t i = pos;
    if (!is_white_space(utf8::next_codepoint(text, i))) break;
    pos = i;
  }
  return pos;
}

}  // namespace dsv4
