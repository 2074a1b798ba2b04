#include "grammar/compiled_grammar.h"

#include <algorithm>

#include "core/error.h"

namespace dsv4::grammar {

CompiledGrammar::CompiledGrammar(const Grammar& g, std::shared_ptr<const TokenTrie> vocab, CompileOptions options)
    : trie_(std::move(vocab)), options_(options), automaton_(build_nfa(g), options.max_depth) {
  start_ = automaton_.start();
  end_mask_.assign(mask_words(), 0);
  const int32_t eos = trie_->eos();
  if (eos >= 0 && eos < trie_->size()) end_mask_[static_cast<size_t>(eos) >> 5] |= 1u << (eos & 31);
}

// The trie in preorder: a node's parent configuration sits at depth - 1 of `at` when the node comes up,
// so one pass with a dead prefix skipping its subtree visits exactly the live prefixes.
void CompiledGrammar::compute_mask(int32_t config, std::vector<uint32_t>& words) const {
  words.assign(mask_words(), 0);
  const auto& nodes = trie_->nodes();
  const auto& ids = trie_->ids();
  std::vector<int32_t> at(trie_->max_depth() + 1, kDead);
  at[0] = config;
  for (size_t i = 0; i < nodes.size();) {
    const TokenTrie::Node& n = nodes[i];
    const int32_t next = automaton_.step(at[n.depth - 1u], n.byte);
    if (next == kDead) {
      i = n.skip;
      continue;
    }
    at[n.depth] = next;
    for (uint32_t k = n.ids_begin; k < n.ids_end; ++k) {
      const auto id = static_cast<uint32_t>(ids[k]);
      words[id >> 5] |= 1u << (id & 31);
    }
    ++i;
  }
  const int32_t eos = trie_->eos();
  if (eos >= 0 && eos < trie_->size() && automaton_.accepting(config))
    words[static_cast<size_t>(eos) >> 5] |= 1u << (eos & 31);
}

std::span<const uint32_t> CompiledGrammar::mask(int32_t config, std::vector<uint32_t>& scratch) const {
  if (config == kEnded || config == kDead) return end_mask_;  // nothing but the end again: the row is over
  const auto lock = automaton_.lock();
  const auto it = masks_.find(config);
  if (it != masks_.end()) return it->second;
  compute_mask(config, scratch);
  if (masks_.size() >= options_.max_cached_masks) return scratch;
  return masks_.emplace(config, scratch).first->second;
}

void CompiledGrammar::fill_mask(int32_t config, std::span<uint32_t> words) const {
  DSV4_CHECK(words.size() >= mask_words(), "grammar: a mask of {} words for {} tokens", words.size(), vocab_size());
  std::vector<uint32_t> scratch;
  const std::span<const uint32_t> m = mask(config, scratch);
  std::copy(m.begin(), m.end(), words.begin());
  std::fill(words.begin() + static_cast<std::ptrdiff_t>(m.size()), words.end(), 0u);
}

int32_t CompiledGrammar::advance(int32_t config, int32_t token) const {
  if (config == kEnded || config == kDead || token < 0 || token >= trie_->size()) return kDead;
  const auto lock = automaton_.lock();
  if (token == trie_->eos()) return automaton_.accepting(config) ? kEnded : kDead;
  const std::string& bytes = trie_->bytes(token);
  if (bytes.empty()) return kDead;
  return automaton_.walk(config, bytes);
}

bool CompiledGrammar::accepting(int32_t config) const {
  if (config == kEnded) return true;
  if (config == kDead) return false;
  const auto lock = automaton_.lock();
  return automaton_.accepting(config);
}

bool CompiledGrammar::can_continue(int32_t config) const {
  if (config < 0) return false;
  const auto lock = automaton_.lock();
  return automaton_.can_continue(config);
}

int32_t CompiledGrammar::walk(int32_t config, std::string_view bytes) const {
  if (config < 0) return kDead;
  const auto lock = automaton_.lock();
  return automaton_.walk(config, bytes);
}

size_t CompiledGrammar::configurations() const {
  const auto lock = automaton_.lock();
  return automaton_.size();
}

}  // namespace dsv4::grammar
