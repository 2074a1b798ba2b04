#include "kv/block_pool.h"

#include <algorithm>

#include "core/error.h"

namespace dsv4 {

BlockPool::BlockPool(int64_t page_bytes, int64_t num_pages, std::vector<int> unit_layers)
    : page_bytes_(page_bytes), num_pages_(num_pages), unit_layers_(std::move(unit_layers)) {
  cached_blocks_.assign(unit_layers_.size(), 0);
  DSV4_CHECK(num_pages >= 0 && num_pages < (int64_t{1} << 31), "KV pool: {} pages is out of range", num_pages);
  DSV4_CHECK(!unit_layers_.empty() && unit_layers_.size() < 256, "KV pool: needs 1 to 255 units");
  size_t blocks = 0, pages = 0;
  for (int layers : unit_layers_) {
    DSV4_CHECK(layers > 0, "KV pool: a unit must have layers");
    const auto n = static_cast<size_t>(num_pages / layers);  // the most blocks the unit could ever hold
    unit_first_block_.push_back(static_cast<uint32_t>(blocks));
    unit_page_offset_.push_back(pages);
    blocks += n;
    pages += n * static_cast<size_t>(layers);
  }
  DSV4_CHECK(blocks < (size_t{1} << 31), "KV pool: too many blocks ({})", blocks);
  unit_first_block_.push_back(static_cast<uint32_t>(blocks));
  page_lists_.resize(pages);
  unit_of_block_.resize(blocks);
  state_.assign(blocks, kFree);
  refcount_.assign(blocks, 0);
  key_.assign(blocks, 0);
  keyed_.assign(blocks, 0);
  extra_.assign(blocks, 0);
  lru_prev_.assign(blocks, kNone);
  lru_next_.assign(blocks, kNone);
  free_blocks_.resize(unit_layers_.size());
  spare_blocks_.resize(unit_layers_.size());
  for (size_t u = 0; u < unit_layers_.size(); ++u) {
    for (uint32_t b = unit_first_block_[u + 1]; b-- > unit_first_block_[u];) {
      unit_of_block_[b] = static_cast<uint8_t>(u);
      free_blocks_[u].push_back(b);
    }
  }
  free_pages_.reserve(static_cast<size_t>(num_pages));
  for (int64_t p = num_pages; p-- > 0;) free_pages_.push_back(static_cast<uint32_t>(p));
}

uint32_t* BlockPool::pages_of(uint32_t block) {
  const int u = unit_of_block_[block];
  return page_lists_.data() + unit_page_offset_[static_cast<size_t>(u)] +
         static_cast<size_t>(block - unit_first_block_[static_cast<size_t>(u)]) *
             static_cast<size_t>(unit_layers_[static_cast<size_t>(u)]);
}

uint32_t BlockPool::allocate(int local_unit) {
  const auto u = static_cast<size_t>(local_unit);
  const auto layers = static_cast<size_t>(unit_layers_.at(u));
  if (!spare_blocks_[u].empty()) {  // the common case in decoding: a window page that just slid out
    const uint32_t b = spare_blocks_[u].back();
    spare_blocks_[u].pop_back();
    spare_pages_ -= static_cast<int64_t>(layers);
    used_pages_ += static_cast<int64_t>(layers);
    state_[b] = kUsed;
    refcount_[b] = 1;
    return b;
  }
  while (free_pages_.size() < layers) {
    if (dissolve_spare(u)) continue;
    DSV4_CHECK(lru_[0].head != kNone || lru_[1].head != kNone,
               "KV pool ({} B pages): out of pages ({} free, {} needed, nothing evictable)", page_bytes_, free_pages(),
               layers);
    evict_oldest();
  }
  DSV4_CHECK(!free_blocks_[u].empty(), "KV pool: no free block id for unit {}", local_unit);
  const uint32_t b = free_blocks_[u].back();
  free_blocks_[u].pop_back();
  uint32_t* pages = pages_of(b);
  std::copy(free_pages_.end() - static_cast<std::ptrdiff_t>(layers), free_pages_.end(), pages);
  free_pages_.resize(free_pages_.size() - layers);
  log_change(b);
  state_[b] = kUsed;
  refcount_[b] = 1;
  used_pages_ += static_cast<int64_t>(layers);
  return b;
}

void BlockPool::log_change(uint32_t block) {
  if (changes_.size() >= std::max<size_t>(state_.size(), 1)) {  // mirrors this far behind copy everything
    changes_base_ += changes_.size();
    changes_.clear();
  }
  changes_.push_back(block);
}

BlockPool::PageListChanges BlockPool::page_list_changes(uint64_t since) const {
  PageListChanges c;
  c.next = changes_base_ + changes_.size();
  DSV4_CHECK(since <= c.next, "KV pool: page-list changes asked from {} of {}", since, c.next);
  c.all = since < changes_base_;
  if (!c.all) c.blocks = std::span<const uint32_t>(changes_).subspan(static_cast<size_t>(since - changes_base_));
  return c;
}

// Returns the pages of one spare block of another unit to the free stack; false when there is none.
bool BlockPool::dissolve_spare(size_t except_unit) {
  for (size_t v = 0; v < spare_blocks_.size(); ++v) {
    if (v == except_unit || spare_blocks_[v].empty()) continue;
    const uint32_t b = spare_blocks_[v].back();
    spare_blocks_[v].pop_back();
    spare_pages_ -= unit_layers_[v];
    dissolve(b);
    return true;
  }
  return false;
}

void BlockPool::retain(uint32_t block) {
  DSV4_CHECK(block < state_.size() && (state_[block] == kUsed || state_[block] == kCached),
             "KV pool: retain of a free block {}", block);
  if (state_[block] == kCached) {
    lru_remove(block);
    const int64_t layers = unit_layers_[unit_of_block_[block]];
    cached_pages_ -= layers;
    --cached_blocks_[static_cast<size_t>(unit_of_block_[block])];
    used_pages_ += layers;
    state_[block] = kUsed;
  }
  ++refcount_[block];
}

void BlockPool::release(uint32_t block) {
  DSV4_CHECK(block < state_.size() && state_[block] == kUsed && refcount_[block] > 0,
             "KV pool: release of block {} which is not in use (double free)", block);
  if (--refcount_[block] > 0) return;
  const int64_t layers = unit_layers_[unit_of_block_[block]];
  used_pages_ -= layers;
  if (keyed_[block]) {
    state_[block] = kCached;
    cached_pages_ += layers;
    ++cached_blocks_[static_cast<size_t>(unit_of_block_[block])];
    lru_push_back(block);
  } else {
    state_[block] = kSpare;
    spare_pages_ += layers;
    spare_blocks_[unit_of_block_[block]].push_back(block);
  }
}

bool BlockPool::set_key(uint32_t block, uint64_t key, bool extra) {
  DSV4_CHECK(block < state_.size() && state_[block] == kUsed, "KV pool: set_key on block {} not in use", block);
  if (keyed_[block]) return key_[block] == key;
  if (!index_.emplace(key, block).second) return false;
  key_[block] = key;
  keyed_[block] = 1;
  extra_[block] = extra ? 1 : 0;
  return true;
}

int32_t BlockPool::find(uint64_t key) const {
  const auto it = index_.find(key);
  return it == index_.end() ? kNone : static_cast<int32_t>(it->second);
}

void BlockPool::evict_oldest() {
  const auto b = static_cast<uint32_t>(lru_[1].head != kNone ? lru_[1].head : lru_[0].head);
  lru_remove(b);
  cached_pages_ -= unit_layers_[unit_of_block_[b]];
  --cached_blocks_[static_cast<size_t>(unit_of_block_[b])];
  ++evictions_;
  if (on_evict_) on_evict_(b, key_[b], extra_[b] != 0);
  dissolve(b);
}

void BlockPool::dissolve(uint32_t block) {
  if (keyed_[block]) {
    index_.erase(key_[block]);
    keyed_[block] = 0;
    extra_[block] = 0;
  }
  const auto layers = static_cast<size_t>(unit_layers_[unit_of_block_[block]]);
  const uint32_t* pages = pages_of(block);
  free_pages_.insert(free_pages_.end(), pages, pages + layers);
  state_[block] = kFree;
  refcount_[block] = 0;
  free_blocks_[unit_of_block_[block]].push_back(block);
}

void BlockPool::lru_push_back(uint32_t block) {
  Lru& l = lru_[extra_[block]];
  lru_prev_[block] = l.tail;
  lru_next_[block] = kNone;
  if (l.tail != kNone) {
    lru_next_[static_cast<size_t>(l.tail)] = static_cast<int32_t>(block);
  } else {
    l.head = static_cast<int32_t>(block);
  }
  l.tail = static_cast<int32_t>(block);
}

void BlockPool::lru_remove(uint32_t block) {
  Lru& l = lru_[extra_[block]];
  const int32_t prev = lru_prev_[block], next = lru_next_[block];
  (prev != kNone ? lru_next_[static_cast<size_t>(prev)] : l.head) = next;
  (next != kNone ? lru_prev_[static_cast<size_t>(next)] : l.tail) = prev;
  lru_prev_[block] = lru_next_[block] = kNone;
}

void BlockPool::check() const {
  std::vector<uint8_t> seen(static_cast<size_t>(num_pages_), 0);
  auto mark = [&](uint32_t page, const char* where) {
    DSV4_CHECK(page < seen.size() && !seen[page], "KV pool: page {} appears twice ({})", page, where);
    seen[page] = 1;
  };
  for (uint32_t p : free_pages_) mark(p, "free stack");
  int64_t used = 0, cached = 0, spare = 0, lru_count = 0;
  for (uint32_t b = 0; b < state_.size(); ++b) {
    if (state_[b] == kFree) {
      DSV4_CHECK(!keyed_[b] && !extra_[b] && refcount_[b] == 0, "KV pool: free block {} is keyed or referenced", b);
      continue;
    }
    for (uint32_t p : layer_pages(b)) mark(p, "block page list");
    const int64_t layers = unit_layers_[unit_of_block_[b]];
    if (state_[b] == kUsed) {
      DSV4_CHECK(refcount_[b] > 0, "KV pool: used block {} has no reference", b);
      used += layers;
    } else if (state_[b] == kSpare) {
      DSV4_CHECK(refcount_[b] == 0 && !keyed_[b], "KV pool: spare block {} is referenced or keyed", b);
      spare += layers;
    } else {
      DSV4_CHECK(refcount_[b] == 0 && keyed_[b], "KV pool: cached block {} is referenced or unkeyed", b);
      cached += layers;
    }
    if (keyed_[b]) {
      const auto it = index_.find(key_[b]);
      DSV4_CHECK(it != index_.end() && it->second == b, "KV pool: key of block {} is not indexed", b);
    }
  }
  for (int t = 0; t < 2; ++t) {
    for (int32_t b = lru_[t].head; b != kNone; b = lru_next_[static_cast<size_t>(b)]) {
      DSV4_CHECK(state_[static_cast<size_t>(b)] == kCached, "KV pool: LRU holds block {} which is not cached", b);
      DSV4_CHECK(extra_[static_cast<size_t>(b)] == t, "KV pool: block {} is in the wrong LRU list", b);
      DSV4_CHECK(++lru_count <= static_cast<int64_t>(state_.size()), "KV pool: LRU list has a cycle");
    }
  }
  const auto n_cached = std::count(state_.begin(), state_.end(), kCached);
  std::vector<int64_t> per_unit(cached_blocks_.size(), 0);
  for (size_t b = 0; b < state_.size(); ++b)
    if (state_[b] == kCached) ++per_unit[static_cast<size_t>(unit_of_block_[b])];
  DSV4_CHECK(per_unit == cached_blocks_, "KV pool: cached blocks per unit disagree with the kept counts");
  DSV4_CHECK(lru_count == n_cached, "KV pool: LRU has {} blocks, {} are cached", lru_count, n_cached);
  DSV4_CHECK(static_cast<int64_t>(index_.size()) == std::count(keyed_.begin(), keyed_.end(), 1),
             "KV pool: key index and keyed blocks disagree");
  DSV4_CHECK(used == used_pages_ && cached == cached_pages_, "KV pool: counted {} used / {} cached pages, kept {} / {}",
             used, cached, used_pages_, cached_pages_);
  DSV4_CHECK(spare == spare_pages_, "KV pool: counted {} spare pages, kept {}", spare, spare_pages_);
  DSV4_CHECK(used + cached + free_pages() == num_pages_, "KV pool: used {} + cached {} + free {} != capacity {}", used,
             cached, free_pages(), num_pages_);
  // The per-unit lists of free and of spare blocks hold exactly the blocks in that state, each in its unit's list.
  const auto check_lists = [&](const std::vector<std::vector<uint32_t>>& lists, State state, const char* name) {
    size_t listed = 0;
    for (size_t u = 0; u < lists.size(); ++u) {
      listed += lists[u].size();
      for (uint32_t b : lists[u]) {
        DSV4_CHECK(state_[b] == state && unit_of_block_[b] == u, "KV pool: {} list of unit {} holds block {}", name, u,
                   b);
      }
    }
    DSV4_CHECK(listed == static_cast<size_t>(std::count(state_.begin(), state_.end(), state)),
               "KV pool: {} lists hold {} ids for a different number of {} blocks", name, listed, name);
  };
  check_lists(free_blocks_, kFree, "free");
  check_lists(spare_blocks_, kSpare, "spare");
}

}  // namespace dsv4
