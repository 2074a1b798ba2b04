// The vocabulary as a trie of token bytes, laid out in preorder so that one forward loop visits every
// token and skips a whole subtree (every token sharing a dead prefix) in one jump. Built once per
// tokenizer and shared by every compiled grammar.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dsv4::grammar {

// What a grammar matches tokens against, by id.
struct Vocabulary {
  // The bytes a token adds to the text; empty for ids a grammar never allows (special tokens, unused
  // ids), except `eos`.
  std::vector<std::string> bytes;
  int32_t eos = -1;  // allowed exactly where the grammar may end
};

class TokenTrie {
 public:
  struct Node {
    uint8_t byte = 0;
    uint16_t depth = 0;      // 1 for a token's first byte
    uint32_t skip = 0;       // the first node after this node's subtree
    uint32_t ids_begin = 0;  // tokens ending here: ids()[ids_begin, ids_end)
    uint32_t ids_end = 0;
  };

  explicit TokenTrie(Vocabulary vocab);

  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<int32_t>& ids() const { return ids_; }
  int32_t size() const { return static_cast<int32_t>(vocab_.bytes.size()); }  // ids 0..size-1
  int32_t eos() const { return vocab_.eos; }
  size_t max_depth() const { return max_depth_; }
  const std::string& bytes(int32_t id) const { return vocab_.bytes[static_cast<size_t>(id)]; }

 private:
  Vocabulary vocab_;
  std::vector<Node> nodes_;
  std::vector<int32_t> ids_;
  size_t max_depth_ = 0;
};

}  // namespace dsv4::grammar
