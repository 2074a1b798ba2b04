// Memo of BPE results per pre-tokenized word (raw bytes -> token ids), shared by all threads: 16 shards,
// each an open-addressing table over flat arenas behind its own mutex. A full shard is cleared and refilled,
// which keeps memory bounded and lets a long-running server follow what it sees.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace dsv4 {

class WordCache {
 public:
  static constexpr size_t kMaxWordBytes = 128;  // longer words are not cached
  static constexpr size_t kShards = 16;
  static constexpr size_t kSlotsPerShard = 8192;

  static uint64_t hash(std::string_view word);

  // Appends the ids cached for word to out; false when it is not cached.
  bool lookup(std::string_view word, uint64_t hash, std::vector<int32_t>& out) const;
  void insert(std::string_view word, uint64_t hash, const int32_t* ids, size_t count);

 private:
  struct Entry {
    uint64_t hash = 0;
    uint32_t key_offset = 0;
    uint32_t ids_offset = 0;
    uint16_t key_length = 0;
    uint16_t id_count = 0;  // 0: empty slot
  };
  struct Shard {
    std::mutex mu;
    std::vector<Entry> slots;
    std::string keys;
    std::vector<int32_t> ids;
    size_t used = 0;
    void clear();
  };
  static Shard& shard_of(std::array<Shard, kShards>& shards, uint64_t hash) { return shards[hash >> 60]; }

  mutable std::array<Shard, kShards> shards_;
};

}  // namespace dsv4
