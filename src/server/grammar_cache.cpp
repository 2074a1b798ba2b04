#include "server/grammar_cache.h"

namespace dsv4::server {

grammar::Vocabulary grammar_vocabulary(const Tokenizer& tokenizer, int32_t eos) {
  grammar::Vocabulary v;
  v.bytes.resize(static_cast<size_t>(tokenizer.vocab_size()));
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (!tokenizer.is_special(id) && !tokenizer.id_to_token(id).empty())
      v.bytes[static_cast<size_t>(id)] = tokenizer.token_bytes(id);
  }
  v.eos = eos;
  return v;
}

std::shared_ptr<const grammar::TokenTrie> GrammarCache::vocabulary(const Tokenizer& tokenizer, int32_t eos) {
  if (!vocab_) vocab_ = std::make_shared<const grammar::TokenTrie>(grammar_vocabulary(tokenizer, eos));
  return vocab_;
}

std::shared_ptr<const grammar::CompiledGrammar> GrammarCache::get(const std::string& key,
                                                                  const std::function<grammar::Grammar()>& build,
                                                                  const Tokenizer& tokenizer, int32_t eos) {
  std::shared_ptr<const grammar::TokenTrie> vocab;
  {
    std::lock_guard lock(mu_);
    if (const auto it = grammars_.find(key); it != grammars_.end()) return it->second;
    vocab = vocabulary(tokenizer, eos);
  }
  // Compiled outside the lock: a large grammar does not hold up other requests.
  auto compiled = std::make_shared<const grammar::CompiledGrammar>(build(), vocab);
  std::lock_guard lock(mu_);
  if (const auto it = grammars_.find(key); it != grammars_.end()) return it->second;
  grammars_.emplace(key, compiled);
  order_.push_back(key);
  if (order_.size() > capacity_) {
    grammars_.erase(order_.front());
    order_.pop_front();
  }
  return compiled;
}

size_t GrammarCache::size() const {
  std::lock_guard lock(mu_);
  return grammars_.size();
}

}  // namespace dsv4::server
