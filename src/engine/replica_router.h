// ReplicaRouter: which data-parallel replica a request goes to. A replica keeps the prefix-cache blocks
// of the prompts it served, so a prompt that continues one (the next turn of a conversation, an agent's
// growing context) goes where its blocks are, unless that replica has more unfinished requests than the
// least loaded one by more than a margin; any other prompt goes to the least loaded replica (the lowest
// index on a tie). The router remembers the block hashes (kv/block_hash.h) of the prompts it routed, up
// to `capacity` blocks, dropping the least recently used; it never looks into the replicas' caches, so a
// block a replica has since evicted may still draw its prompts there: a cache miss, never a wrong answer.
// Not thread-safe (the Engine locks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dsv4 {

class ReplicaRouter {
 public:
  explicit ReplicaRouter(int replicas, size_t capacity = size_t{1} << 16);

  // `loads`: each replica's unfinished requests. Remembers the prompt's blocks under the replica chosen.
  int route(std::span<const int32_t> prompt, std::string_view cache_salt, std::span<const size_t> loads);

  // The longest remembered prefix of a prompt's block hashes: its replica (-1: none) and blocks.
  struct Match {
    int replica = -1;
    size_t blocks = 0;
  };
  Match longest(std::span<const uint64_t> hashes) const;
  size_t remembered() const { return where_.size(); }

  // A replica with affinity may be this much busier than the least loaded one.
  static size_t margin(size_t least) { return least / 4 > 2 ? least / 4 : 2; }

 private:
  void remember(uint64_t hash, int replica);

  int replicas_;
  size_t capacity_;
  std::list<uint64_t> order_;  // front = least recently routed
  struct Entry {
    int replica;
    std::list<uint64_t>::iterator at;
  };
  std::unordered_map<uint64_t, Entry> where_;
};

}  // namespace dsv4
