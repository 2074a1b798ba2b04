// BlockPool: the layer pages of one size bucket and the blocks built from them.
//
// A block belongs to one unit of the pool and owns one layer page per layer of that unit (its page list);
// blocks of different units share the pages, so memory moves freely between the units of a bucket.
// Block states: unassigned (no pages), spare (pages but no content: a freed block kept whole so that its
// unit can reuse it without touching its page list), used (reference count > 0), cached (count 0 but keyed
// for the prefix cache; evictable). Allocation takes, in order: a spare block of the unit, pages from the
// free stack, pages of other units' spare blocks, and only then evicts cached blocks, oldest first (LRU).
// Cached blocks keyed as `extra` (sliding checkpoints kept between a prompt's blocks) are all evicted
// before any other: under memory pressure dense retention falls back to keeping each prompt's full
// blocks and last window, instead of letting a new prompt's many checkpoints push out an older prompt's
// only one.
// Free pages = the free stack plus the pages of spare blocks. Every page is in exactly one place.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <unordered_map>
#include <vector>

namespace dsv4 {

class BlockPool {
 public:
  static constexpr int32_t kNone = -1;

  // unit_layers[i]: layers of the pool's i-th unit (its blocks take that many pages).
  BlockPool(int64_t page_bytes, int64_t num_pages, std::vector<int> unit_layers);

  int64_t page_bytes() const { return page_bytes_; }
  int64_t capacity_pages() const { return num_pages_; }
  int64_t free_pages() const { return static_cast<int64_t>(free_pages_.size()) + spare_pages_; }
  int64_t used_pages() const { return used_pages_; }
  int64_t cached_pages() const { return cached_pages_; }
  // Blocks of one unit kept only for the prefix cache (evictable).
  int64_t cached_blocks(int local_unit) const { return cached_blocks_[static_cast<size_t>(local_unit)]; }
  int unit_layers(int local_unit) const { return unit_layers_[static_cast<size_t>(local_unit)]; }
  uint64_t evictions() const { return evictions_; }
  uint32_t num_blocks() const { return static_cast<uint32_t>(state_.size()); }

  // A new block of the unit with reference count 1; evicts cached blocks (LRU first) when the free pages
  // do not suffice. Throws dsv4::Error when even that cannot make room (callers check first).
  uint32_t allocate(int local_unit);
  // Reference count +1; a cached block becomes used again.
  void retain(uint32_t block);
  // Reference count −1; at 0 a keyed block becomes cached (LRU tail), an unkeyed one spare (reused first).
  void release(uint32_t block);
  // Names a used block for the prefix cache; false when the key already names a block. `extra` blocks are
  // evicted before all others (see above).
  bool set_key(uint32_t block, uint64_t key, bool extra = false);
  // The block the key names, or kNone.
  int32_t find(uint64_t key) const;
  // Called with each cached block about to be evicted, while its pages still hold its bytes (the host tier
  // copies them out before the pages are reused).
  using EvictObserver = std::function<void(uint32_t block, uint64_t key, bool extra)>;
  void set_evict_observer(EvictObserver f) { on_evict_ = std::move(f); }

  uint32_t refcount(uint32_t block) const { return refcount_[block]; }
  bool cached(uint32_t block) const { return state_[block] == kCached; }
  int local_unit(uint32_t block) const { return unit_of_block_[block]; }
  std::span<const uint32_t> layer_pages(uint32_t block) const {
    const int u = unit_of_block_[block];
    const size_t layers = static_cast<size_t>(unit_layers_[static_cast<size_t>(u)]);
    const size_t at =
        unit_page_offset_[static_cast<size_t>(u)] + (block - unit_first_block_[static_cast<size_t>(u)]) * layers;
    return {page_lists_.data() + at, layers};
  }

  // Every block's page list in one array, for mirrors of it (a device copy): block b of local unit u
  // at unit_page_offset(u) + (b − unit_first_block(u)) · unit_layers(u). Only allocate() changes an entry.
  std::span<const uint32_t> page_lists() const { return page_lists_; }
  size_t unit_page_offset(int u) const { return unit_page_offset_[static_cast<size_t>(u)]; }
  uint32_t unit_first_block(int u) const { return unit_first_block_[static_cast<size_t>(u)]; }
  uint32_t unit_blocks(int u) const {
    return unit_first_block_[static_cast<size_t>(u) + 1] - unit_first_block_[static_cast<size_t>(u)];
  }

  // The blocks whose page lists were assigned after the first `since` assignments of the pool's life, in
  // order (repeats possible), and the count to pass next time. Any number of mirrors can follow the log:
  // each keeps its own count. The log keeps at most as many entries as there are blocks; a mirror that fell
  // further behind gets `all` (copy every list).
  struct PageListChanges {
    bool all = false;
    std::span<const uint32_t> blocks;
    uint64_t next = 0;
  };
  PageListChanges page_list_changes(uint64_t since) const;

  // Full consistency check (tests): every page in one place, counts, LRU and key index agree.
  void check() const;

 private:
  enum State : uint8_t { kFree, kSpare, kUsed, kCached };

  uint32_t* pages_of(uint32_t block);
  void evict_oldest();
  bool dissolve_spare(size_t except_unit);
  void dissolve(uint32_t block);
  void lru_push_back(uint32_t block);
  void lru_remove(uint32_t block);
  void log_change(uint32_t block);

  // Two LRU lists over the same links: [0] blocks kept first, [1] extra ones, evicted first.
  struct Lru {
    int32_t head = kNone, tail = kNone;
  };

  int64_t page_bytes_;
  int64_t num_pages_;
  std::vector<int> unit_layers_;
  std::vector<uint32_t> unit_first_block_;  // blocks of unit i: [first[i], first[i+1])
  std::vector<size_t> unit_page_offset_;    // where unit i's page lists start in page_lists_
  std::vector<uint32_t> page_lists_;
  std::vector<uint8_t> unit_of_block_;
  std::vector<uint8_t> state_;
  std::vector<uint32_t> refcount_;
  std::vector<uint64_t> key_;
  std::vector<uint8_t> keyed_;
  std::vector<uint8_t> extra_;
  std::vector<int32_t> lru_prev_, lru_next_;
  Lru lru_[2];
  std::vector<uint32_t> free_pages_;
  std::vector<std::vector<uint32_t>> free_blocks_;   // per unit: ids without pages
  std::vector<std::vector<uint32_t>> spare_blocks_;  // per unit: ids with pages, no content
  std::unordered_map<uint64_t, uint32_t> index_;
  int64_t used_pages_ = 0, cached_pages_ = 0, spare_pages_ = 0;
  std::vector<int64_t> cached_blocks_;  // per local unit
  uint64_t evictions_ = 0;
  EvictObserver on_evict_;
  std::vector<uint32_t> changes_;  // the page-list log: assignments changes_base_, changes_base_ + 1, ...
  uint64_t changes_base_ = 0;
};

}  // namespace dsv4
