#include "kv/host_tier.h"

#include <algorithm>

#include "core/error.h"

namespace dsv4 {

KvHostTier::KvHostTier(std::vector<int64_t> page_bytes, std::vector<int64_t> pages, KvMemoryAllocator* memory)
    : memory_(memory) {
  DSV4_CHECK(page_bytes.size() == pages.size(), "KV host tier: {} page sizes for {} pools", page_bytes.size(),
             pages.size());
  buckets_.resize(pages.size());
  for (size_t i = 0; i < pages.size(); ++i) {
    Bucket& b = buckets_[i];
    DSV4_CHECK(page_bytes[i] > 0 && pages[i] >= 0 && pages[i] < (int64_t{1} << 31),
               "KV host tier: pool {} of {} pages of {} B is out of range", i, pages[i], page_bytes[i]);
    b.page_bytes = page_bytes[i];
    b.capacity = pages[i];
    b.counters.page_bytes = b.page_bytes;
    b.counters.capacity_pages = b.capacity;
    for (int64_t p = b.capacity; p-- > 0;) b.free_pages.push_back(static_cast<uint32_t>(p));
    if (memory_ != nullptr && b.capacity > 0)
      b.memory = memory_->allocate(static_cast<size_t>(b.capacity * b.page_bytes));
  }
}

std::vector<std::pair<std::byte*, size_t>> KvHostTier::regions() const {
  std::vector<std::pair<std::byte*, size_t>> out;
  for (const Bucket& b : buckets_)
    out.emplace_back(b.memory, b.memory ? static_cast<size_t>(b.capacity * b.page_bytes) : 0);
  return out;
}

KvHostTier::~KvHostTier() {
  for (Bucket& b : buckets_) {
    if (b.memory != nullptr) memory_->deallocate(b.memory, static_cast<size_t>(b.capacity * b.page_bytes));
  }
}

KvHostTier::Bucket& KvHostTier::bucket(int b) {
  DSV4_CHECK(b >= 0 && b < static_cast<int>(buckets_.size()), "KV host tier: no pool {}", b);
  return buckets_[static_cast<size_t>(b)];
}

const KvHostTier::Bucket& KvHostTier::bucket(int b) const {
  DSV4_CHECK(b >= 0 && b < static_cast<int>(buckets_.size()), "KV host tier: no pool {}", b);
  return buckets_[static_cast<size_t>(b)];
}

void KvHostTier::drop_oldest(Bucket& b) {
  KvHostEntry& e = b.lru.front();
  b.free_pages.insert(b.free_pages.end(), e.pages.begin(), e.pages.end());
  b.index.erase(e.key);
  b.lru.pop_front();
  ++b.counters.evictions;
}

std::span<const uint32_t> KvHostTier::store(int bi, uint64_t key, int local_unit, int layers, bool extra) {
  Bucket& b = bucket(bi);
  DSV4_CHECK(layers > 0, "KV host tier: a block needs pages");
  if (const auto it = b.index.find(key); it != b.index.end()) {  // stored again: same bytes, now most recent
    b.lru.splice(b.lru.end(), b.lru, it->second);
    ++b.counters.stored;
    return it->second->pages;
  }
  const auto n = static_cast<size_t>(layers);
  while (b.free_pages.size() < n && !b.lru.empty()) drop_oldest(b);
  if (b.free_pages.size() < n) {
    ++b.counters.dropped;
    return {};
  }
  KvHostEntry e{key, local_unit, extra,
                std::vector<uint32_t>(b.free_pages.end() - static_cast<std::ptrdiff_t>(n), b.free_pages.end())};
  b.free_pages.resize(b.free_pages.size() - n);
  b.lru.push_back(std::move(e));
  b.index.emplace(key, std::prev(b.lru.end()));
  ++b.counters.stored;
  return b.lru.back().pages;
}

const KvHostEntry* KvHostTier::find(int bi, uint64_t key) const {
  const Bucket& b = bucket(bi);
  const auto it = b.index.find(key);
  return it == b.index.end() ? nullptr : &*it->second;
}

KvHostEntry KvHostTier::take(int bi, uint64_t key) {
  Bucket& b = bucket(bi);
  const auto it = b.index.find(key);
  DSV4_CHECK(it != b.index.end(), "KV host tier: pool {} holds no block with key {:#x}", bi, key);
  KvHostEntry e = std::move(*it->second);
  b.lru.erase(it->second);
  b.index.erase(it);
  b.taken_pages += static_cast<int64_t>(e.pages.size());
  ++b.counters.restored;
  return e;
}

void KvHostTier::release(int bi, std::span<const uint32_t> pages) {
  Bucket& b = bucket(bi);
  DSV4_CHECK(static_cast<int64_t>(pages.size()) <= b.taken_pages, "KV host tier: pool {} releases {} pages, {} taken",
             bi, pages.size(), b.taken_pages);
  b.taken_pages -= static_cast<int64_t>(pages.size());
  b.free_pages.insert(b.free_pages.end(), pages.begin(), pages.end());
}

std::byte* KvHostTier::page_address(int bi, uint32_t page) const {
  const Bucket& b = bucket(bi);
  DSV4_CHECK(b.memory != nullptr && page < b.capacity, "KV host tier: pool {} has no page {} in memory", bi, page);
  return b.memory + static_cast<int64_t>(page) * b.page_bytes;
}

std::vector<KvHostTierStats> KvHostTier::stats() const {
  std::vector<KvHostTierStats> s;
  for (const Bucket& b : buckets_) {
    KvHostTierStats t = b.counters;
    t.used_pages = b.capacity - static_cast<int64_t>(b.free_pages.size());
    t.entries = static_cast<int64_t>(b.lru.size());
    s.push_back(t);
  }
  return s;
}

void KvHostTier::check() const {
  for (size_t i = 0; i < buckets_.size(); ++i) {
    const Bucket& b = buckets_[i];
    std::vector<uint8_t> seen(static_cast<size_t>(b.capacity), 0);
    const auto mark = [&](uint32_t p) {
      DSV4_CHECK(p < seen.size() && !seen[p], "KV host tier: pool {} page {} appears twice", i, p);
      seen[p] = 1;
    };
    for (uint32_t p : b.free_pages) mark(p);
    int64_t held = 0;
    for (auto it = b.lru.begin(); it != b.lru.end(); ++it) {
      for (uint32_t p : it->pages) mark(p);
      held += static_cast<int64_t>(it->pages.size());
      const auto at = b.index.find(it->key);
      DSV4_CHECK(at != b.index.end() && at->second == it, "KV host tier: pool {} key {:#x} is not indexed", i, it->key);
    }
    DSV4_CHECK(b.index.size() == b.lru.size(), "KV host tier: pool {} index and LRU disagree", i);
    DSV4_CHECK(static_cast<int64_t>(b.free_pages.size()) + held + b.taken_pages == b.capacity,
               "KV host tier: pool {}: {} free + {} held + {} taken != {} pages", i, b.free_pages.size(), held,
               b.taken_pages, b.capacity);
  }
}

}  // namespace dsv4
