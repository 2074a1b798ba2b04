// TokenMask: the ids one request may sample at its next step. Every constraint a request puts on its
// next token is added here, in one place (Sampler::token_mask): min_tokens' masks of EOS and the stop
// ids, bad_words, allowed_token_ids and a grammar's mask (structured output).
// It has the two forms the sample op takes: ids banned one by one (few; they become mask edits) and
// allow-sets over the whole vocabulary (allowed_token_ids may keep a handful of 129K ids: one bit each
// instead of an edit for every other id). Sets intersect: an id may be sampled when nothing bans it and
// every allow-set holds it. The mask only refers to allow-sets kept elsewhere (the request's own, the
// grammar's cached masks): one set goes to the op where it lies, several are intersected once.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace dsv4 {

class TokenMask {
 public:
  // Ids at or above `limit` are never sampled (the sampler's limit) and never listed.
  explicit TokenMask(int64_t limit);

  // Words of an allow-set over `limit` ids (bit i of word i / 32: id i allowed).
  static int64_t words(int64_t limit) { return (limit + 31) / 32; }
  // The allow-set holding `ids` (those at or above the limit left out).
  static std::vector<uint32_t> allow_set_of(std::span<const int32_t> ids, int64_t limit);

  void ban(int32_t id);
  // Intersects with `set` (at least words(limit) words; those past are ignored). The set is referred
  // to, not copied: it must outlive the mask's use.
  void allow_only(std::span<const uint32_t> set);

  bool banned(int32_t id) const;
  bool restricts() const { return !banned_.empty() || !allow_.empty(); }
  std::span<const int32_t> banned_ids() const { return banned_; }  // ascending, each once
  // The intersection of the allow-sets (empty: every id): the one set itself, or several intersected
  // into `buffer` (resized to words(limit)).
  std::span<const uint32_t> allow_set(std::vector<uint32_t>& buffer) const;

 private:
  int64_t limit_;
  std::vector<int32_t> banned_;
  std::vector<std::span<const uint32_t>> allow_;
};

}  // namespace dsv4
