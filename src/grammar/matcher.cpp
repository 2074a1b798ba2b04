#include "grammar/matcher.h"

#include "core/error.h"

namespace dsv4::grammar {

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> grammar) : grammar_(std::move(grammar)) {
  history_.push_back(grammar_->start());
}

std::span<const uint32_t> Matcher::mask() { return grammar_->mask(history_.back(), scratch_); }

void Matcher::fill_mask(std::span<uint32_t> words) const { grammar_->fill_mask(history_.back(), words); }

bool Matcher::accept(int32_t token) {
  const int32_t next = grammar_->advance(history_.back(), token);
  if (next == kDead) return false;
  history_.push_back(next);
  return true;
}

void Matcher::rollback(size_t k) {
  DSV4_CHECK(k <= accepted(), "grammar: rollback of {} tokens after {}", k, accepted());
  history_.resize(history_.size() - k);
}

}  // namespace dsv4::grammar
