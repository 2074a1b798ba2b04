// The server's compiled grammars: one per distinct structured-output request (keyed by its canonical
// text), compiled against the tokenizer's vocabulary the first time and shared afterwards, so a
// schema sent again costs a lookup and its masks stay cached. Bounded: the oldest grammar goes first.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "grammar/compiled_grammar.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::server {

class GrammarCache {
 public:
  explicit GrammarCache(size_t capacity = 64) : capacity_(capacity) {}

  // The grammar under `key`, compiled by `build` when absent (build's errors propagate).
  std::shared_ptr<const grammar::CompiledGrammar> get(const std::string& key,
                                                      const std::function<grammar::Grammar()>& build,
                                                      const Tokenizer& tokenizer, int32_t eos);
  size_t size() const;

 private:
  std::shared_ptr<const grammar::TokenTrie> vocabulary(const Tokenizer& tokenizer, int32_t eos);

  size_t capacity_;
  mutable std::mutex mu_;
  std::shared_ptr<const grammar::TokenTrie> vocab_;
  std::unordered_map<std::string, std::shared_ptr<const grammar::CompiledGrammar>> grammars_;
  std::deque<std::string> order_;
};

// The grammar vocabulary of a tokenizer: each id's bytes, none for special tokens but `eos`.
grammar::Vocabulary grammar_vocabulary(const Tokenizer& tokenizer, int32_t eos);

}  // namespace dsv4::server
