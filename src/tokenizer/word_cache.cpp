#include "tokenizer/word_cache.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstring>

namespace dsv4 {
namespace {
constexpr size_t kMask = WordCache::kSlotsPerShard - 1;
}

uint64_t WordCache::hash(std::string_view word) { return XXH3_64bits(word.data(), word.size()); }

void WordCache::Shard::clear() {
  slots.assign(kSlotsPerShard, Entry{});
  keys.clear();
  ids.clear();
  used = 0;
}

bool WordCache::lookup(std::string_view word, uint64_t hash, std::vector<int32_t>& out) const {
  Shard& s = shard_of(shards_, hash);
  std::lock_guard lock(s.mu);
  if (s.slots.empty()) return false;
  for (size_t i = hash & kMask;; i = (i + 1) & kMask) {
    const Entry& e = s.slots[i];
    if (e.id_count == 0) return false;
    if (e.hash == hash && e.key_length == word.size() &&
        std::memcmp(s.keys.data() + e.key_offset, word.data(), word.size()) == 0) {
      out.insert(out.end(), s.ids.begin() + e.ids_offset, s.ids.begin() + e.ids_offset + e.id_count);
      return true;
    }
  }
}

void WordCache::insert(std::string_view word, uint64_t hash, const int32_t* ids, size_t count) {
  if (word.size() > kMaxWordBytes || count == 0 || count > kMaxWordBytes) return;
  Shard& s = shard_of(shards_, hash);
  std::lock_guard lock(s.mu);
  if (s.slots.empty() || s.used * 2 >= kSlotsPerShard) s.clear();
  size_t i = hash & kMask;
  for (; s.slots[i].id_count != 0; i = (i + 1) & kMask) {
    const Entry& e = s.slots[i];
    if (e.hash == hash && e.key_length == word.size() &&
        std::memcmp(s.keys.data() + e.key_offset, word.data(), word.size()) == 0)
      return;  // another thread got there first
  }
  s.slots[i] = Entry{hash, static_cast<uint32_t>(s.keys.size()), static_cast<uint32_t>(s.ids.size()),
                     static_cast<uint16_t>(word.size()), static_cast<uint16_t>(count)};
  s.keys.append(word);
  s.ids.insert(s.ids.end(), ids, ids + count);
  ++s.used;
}

}  // namespace dsv4
