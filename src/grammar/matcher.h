// One request's position in a compiled grammar: the configuration after each accepted token, so the
// last k tokens can be taken back (speculative decoding rejects drafted tokens that way).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "grammar/compiled_grammar.h"

namespace dsv4::grammar {

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const CompiledGrammar> grammar);

  // The tokens allowed next (CompiledGrammar::mask): valid until the next accept or rollback.
  std::span<const uint32_t> mask();
  // The same, copied into `words` (CompiledGrammar::fill_mask).
  void fill_mask(std::span<uint32_t> words) const;
  // Moves past `token`; false (and no move) when the grammar does not allow it here.
  bool accept(int32_t token);
  // Takes back the last k accepted tokens (k <= accepted()).
  void rollback(size_t k);
  size_t accepted() const { return history_.size() - 1; }
  // The text so far is a whole document (the end token is allowed).
  bool accepting() const { return grammar_->accepting(history_.back()); }
  // The end token was accepted.
  bool ended() const { return history_.back() == kEnded; }
  const CompiledGrammar& grammar() const { return *grammar_; }

 private:
  std::shared_ptr<const CompiledGrammar> grammar_;
  std::vector<int32_t> history_;   // configurations: the start, then one per accepted token
  std::vector<uint32_t> scratch_;  // the mask, when the grammar's cache is full
};

}  // namespace dsv4::grammar
