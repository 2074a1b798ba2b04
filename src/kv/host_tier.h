// KvHostTier: the second tier of the prefix cache. Keyed blocks the device pools evict are copied here
// (whole blocks: every layer page of the block), one LRU per bucket keyed by the same page keys as the
// pools' index (block_hash.h), and a prefix lookup that misses on the device brings them back.
//
// Each bucket of the device layout has a host pool of pages of the same size, so a block's pages move
// one to one. Entries are exclusive with the device: a restore takes the entry out (its pages stay
// reserved until the copy is done, then return to the free stack); a block evicted again is stored again.
// Storing a key the tier already holds refreshes it (most recent, same pages, copied again).
// Without memory the tier keeps only the bookkeeping (planning, scheduling tests).
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/kv_memory.h"

namespace dsv4 {

struct KvHostEntry {
  uint64_t key = 0;
  int local_unit = 0;  // the block's unit inside its pool
  bool extra = false;  // a checkpoint kept only for the retention interval (block_pool.h)
  std::vector<uint32_t> pages;
};

struct KvHostTierStats {
  int64_t page_bytes = 0;
  int64_t capacity_pages = 0;
  int64_t used_pages = 0;  // entries plus pages of entries being restored
  int64_t entries = 0;
  uint64_t stored = 0;     // blocks copied in (offloads, refreshes included)
  uint64_t dropped = 0;    // evicted blocks larger than the whole host pool
  uint64_t evictions = 0;  // entries dropped for room
  uint64_t restored = 0;   // blocks taken back to the device
};

class KvHostTier {
 public:
  // Per bucket: its page size and host pages (0 = that bucket keeps nothing). `memory` null = bookkeeping.
  KvHostTier(std::vector<int64_t> page_bytes, std::vector<int64_t> pages, KvMemoryAllocator* memory);
  ~KvHostTier();
  KvHostTier(const KvHostTier&) = delete;
  KvHostTier& operator=(const KvHostTier&) = delete;

  // Pages for a block of `layers` pages under `key`, making room by dropping the least recently used
  // entries; empty when the bucket's pool cannot hold the block at all (it is then dropped).
  std::span<const uint32_t> store(int bucket, uint64_t key, int local_unit, int layers, bool extra);
  const KvHostEntry* find(int bucket, uint64_t key) const;
  // Removes the entry from the index and the LRU; its pages stay reserved until release().
  KvHostEntry take(int bucket, uint64_t key);
  void release(int bucket, std::span<const uint32_t> pages);

  std::byte* page_address(int bucket, uint32_t page) const;
  // Each bucket's pages in memory: {first byte, bytes} (null and 0 where it keeps nothing).
  std::vector<std::pair<std::byte*, size_t>> regions() const;
  int64_t page_bytes(int bucket) const { return buckets_[static_cast<size_t>(bucket)].page_bytes; }
  std::vector<KvHostTierStats> stats() const;
  // Full consistency check (tests): every page in one place, index and LRU agree.
  void check() const;

 private:
  struct Bucket {
    int64_t page_bytes = 0;
    int64_t capacity = 0;
    std::byte* memory = nullptr;
    std::list<KvHostEntry> lru;  // front = least recently stored
    std::unordered_map<uint64_t, std::list<KvHostEntry>::iterator> index;
    std::vector<uint32_t> free_pages;
    int64_t taken_pages = 0;
    KvHostTierStats counters;
  };
  Bucket& bucket(int b);
  const Bucket& bucket(int b) const;
  void drop_oldest(Bucket& b);

  std::vector<Bucket> buckets_;
  KvMemoryAllocator* memory_;
};

}  // namespace dsv4
