#include "engine/token_mask.h"

#include <algorithm>

#include "core/error.h"

namespace dsv4 {

TokenMask::TokenMask(int64_t limit) : limit_(limit) { DSV4_CHECK(limit > 0, "token mask: empty vocabulary"); }

std::vector<uint32_t> TokenMask::allow_set_of(std::span<const int32_t> ids, int64_t limit) {
  std::vector<uint32_t> set(static_cast<size_t>(words(limit)), 0);
  for (int32_t id : ids) {
    if (id >= 0 && id < limit) set[static_cast<size_t>(id >> 5)] |= 1u << (id & 31);
  }
  return set;
}

void TokenMask::ban(int32_t id) {
  if (id < 0 || id >= limit_) return;
  const auto at = std::lower_bound(banned_.begin(), banned_.end(), id);
  if (at == banned_.end() || *at != id) banned_.insert(at, id);
}

void TokenMask::allow_only(std::span<const uint32_t> set) {
  DSV4_CHECK(static_cast<int64_t>(set.size()) == words(limit_), "token mask: an allow-set of {} words for {} ids",
             set.size(), limit_);
  if (allow_.empty()) {
    allow_.assign(set.begin(), set.end());
    return;
  }
  for (size_t w = 0; w < allow_.size(); ++w) allow_[w] &= set[w];
}

bool TokenMask::banned(int32_t id) const { return std::binary_search(banned_.begin(), banned_.end(), id); }

}  // namespace dsv4
