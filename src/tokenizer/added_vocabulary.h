// Added tokens (special or not) of a tokenizer.json, found in text before any pre-tokenization, as HF
// tokenizers does: first the tokens with normalized=false on the raw text, then those with normalized=true
// on the remaining pieces; each pass takes leftmost-longest, non-overlapping matches and honours the
// single_word, lstrip and rstrip flags.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dsv4 {

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
};

// A byte trie over token contents answering "leftmost-longest match at or after a position".
class TokenTrie {
 public:
  explicit TokenTrie(const std::vector<const AddedToken*>& tokens);
  bool find(std::string_view text, size_t from, size_t& begin, size_t& end, const AddedToken*& token) const;
  bool empty() const { return tokens_.empty(); }

 private:
  struct Node {
    int32_t token = -1;  // index into tokens_ when a content ends here
    uint32_t first_edge = 0;
    uint32_t edge_count = 0;
  };
  struct Edge {
    uint8_t byte;
    int32_t node;
  };
  int32_t child(const Node& n, uint8_t b) const;

  std::vector<const AddedToken*> tokens_;
  std::array<int32_t, 256> root_{};  // first byte -> node, -1 when no content starts with it
  std::vector<Node> nodes_;
  std::vector<Edge> edges_;  // each node's edges sorted by byte
};

class AddedVocabulary {
 public:
  explicit AddedVocabulary(std::vector<AddedToken> tokens);
  AddedVocabulary(AddedVocabulary&& other) noexcept;
  AddedVocabulary& operator=(AddedVocabulary&&) = delete;
  AddedVocabulary(const AddedVocabulary&) = delete;

  // Splits valid UTF-8 text: on_token(int32_t id) for each added token, on_text(std::string_view) for the
  // (non-empty) text between them, in order.
  template <typename OnText, typename OnToken>
  void split(std::string_view text, OnText&& on_text, OnToken&& on_token) const {
    pass(
        raw_, text, [&](std::string_view gap) { pass(normalized_, gap, on_text, on_token); }, on_token);
  }

  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  template <typename OnText, typename OnToken>
  void pass(const TokenTrie& trie, std::string_view text, OnText&& on_text, OnToken&& on_token) const;
  // HF's checks on the piece being split: is the match a whole word; where its surrounding spaces end.
  static bool single_word_at(std::string_view text, size_t begin, size_t end);
  static size_t spaces_before(std::string_view text, size_t pos);
  static size_t spaces_after(std::string_view text, size_t pos);

  std::vector<AddedToken> tokens_;
  TokenTrie raw_;
  TokenTrie normalized_;
};

template <typename OnText, typename OnToken>
void AddedVocabulary::pass(const TokenTrie& trie, std::string_view text, OnText&& on_text, OnToken&& on_token) const {
  size_t done = 0, pos = 0, begin = 0, end = 0;
  const AddedToken* token = nullptr;
  while (!trie.empty() && trie.find(text, pos, begin, end, token)) {
    pos = end;
    if (token->single_word && !single_word_at(text, begin, end)) continue;
    const size_t start = token->lstrip ? std::max(spaces_before(text, begin), done) : begin;
    const size_t stop = token->rstrip ? spaces_after(text, end) : end;
    if (done < start) on_text(text.substr(done, start - done));
    on_token(token->id);
    done = std::max(done, stop);
  }
  if (done < text.size()) on_text(text.substr(done));
}

}  // namespace dsv4
