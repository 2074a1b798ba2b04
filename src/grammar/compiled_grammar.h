// A grammar compiled against a vocabulary: the automaton over bytes, and per configuration the mask of
// the tokens whose bytes it can read next (a walk of the token trie, cached the first time a
// configuration asks). Compiled once and shared by every request that uses the same grammar; safe
// to use from several threads (one lock around the automaton and the masks).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "grammar/automaton.h"
#include "grammar/grammar.h"
#include "grammar/token_trie.h"

namespace dsv4::grammar {

struct CompileOptions {
  int32_t max_depth = 64;          // call frames (nesting) a configuration may hold
  size_t max_cached_masks = 2048;  // configurations whose masks are kept
};

// The configuration after the end token.
inline constexpr int32_t kEnded = -3;

class CompiledGrammar {
 public:
  CompiledGrammar(const Grammar& g, std::shared_ptr<const TokenTrie> vocab, CompileOptions options = {});

  int32_t start() const { return start_; }
  int32_t vocab_size() const { return trie_->size(); }
  // ceil(vocab_size / 32): the words of a mask.
  size_t mask_words() const { return (static_cast<size_t>(trie_->size()) + 31) / 32; }
  // The tokens allowed after `config`, as bits (id i: bit i % 32 of word i / 32) over mask_words() words:
  // the cached mask itself (it never moves or changes while the grammar lives), or, once the cache is
  // full, the mask computed into `scratch`.
  std::span<const uint32_t> mask(int32_t config, std::vector<uint32_t>& scratch) const;
  // The same, copied into `words` (at least mask_words()).
  void fill_mask(int32_t config, std::span<uint32_t> words) const;
  // The configuration after `token`; kDead when the grammar does not allow it there.
  int32_t advance(int32_t config, int32_t token) const;
  // Whether text may end at `config` (the end token is allowed there).
  bool accepting(int32_t config) const;
  // Whether some byte may follow `config`.
  bool can_continue(int32_t config) const;
  // The configuration after raw bytes (tests): kDead when they leave the grammar.
  int32_t walk(int32_t config, std::string_view bytes) const;
  // Configurations made so far (grows as requests explore the grammar).
  size_t configurations() const;

 private:
  void compute_mask(int32_t config, std::vector<uint32_t>& words) const;

  std::shared_ptr<const TokenTrie> trie_;
  CompileOptions options_;
  mutable Automaton automaton_;
  int32_t start_;
  mutable std::unordered_map<int32_t, std::vector<uint32_t>> masks_;  // under the automaton's lock; never erased
  std::vector<uint32_t> end_mask_;                                    // after the end: only EOS
};

}  // namespace dsv4::grammar
