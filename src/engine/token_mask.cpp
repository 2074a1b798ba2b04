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
  const auto n = static_cast<size_t>(words(limit_));
  DSV4_CHECK(set.size() >= n, "token mask: an allow-set of {} words for {} ids", set.size(), limit_);
  allow_.push_back(set.first(n));
}

std::span<const uint32_t> TokenMask::allow_set(std::vector<uint32_t>& buffer) const {
  if (allow_.size() <= 1) return allow_.empty() ? std::span<const uint32_t>() : allow_[0];
  buffer.assign(allow_[0].begin(), allow_[0].end());
  for (size_t k = 1; k < allow_.size(); ++k) {
    for (size_t w = 0; w < buffer.size(); ++w) buffer[w] &= allow_[k][w];
  }
  return buffer;
}

bool TokenMask::banned(int32_t id) const { return std::binary_search(banned_.begin(), banned_.end(), id); }

}  // namespace dsv4
