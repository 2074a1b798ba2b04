// ReplicaRouter: which data-parallel replica a request goes to. A replica keeps the prefix-cache blocks
// of the prompts it served, so a prompt that continues one (the next turn of a conversation, an agent's
// growing context) goes where the longest part of it was sent before, among the replicas that have at
// most a margin more unfinished requests than the least loaded one; a prompt no such replica has seen
// goes to the least loaded replica (the lowest index on a tie). The router remembers, per block hash
// (kv/block_hash.h) of the prompts it routed, the replicas it sent that block to, up to `capacity`
// blocks, dropping the least recently used; it never looks into the replicas' caches, so a block a
// replica has since evicted may still draw its prompts there: a cache miss, never a wrong answer.
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
  static constexpr int kMaxReplicas = 64;  // one bit each
  explicit ReplicaRouter(int replicas, size_t capacity = size_t{1} << 16);

  // `loads`: each replica's unfinished requests. Remembers the prompt's blocks under the replica chosen.
  int route(std::span<const int32_t> prompt, std::string_view cache_salt, std::span<const size_t> loads) {
    return route(block_hashes(prompt, cache_salt), loads);
  }
  // The same from the prompt's block hashes, made beforehand (outside whatever lock guards the router).
  int route(std::span<const uint64_t> hashes, std::span<const size_t> loads);
  static std::vector<uint64_t> block_hashes(std::span<const int32_t> prompt, std::string_view cache_salt);

  // Per replica, how many leading blocks of these hashes were sent there (0: none).
  std::vector<size_t> matched(std::span<const uint64_t> hashes) const;
  size_t remembered() const { return where_.size(); }

  // A replica may be this much busier than the least loaded one and still draw its prefixes.
  static size_t margin(size_t least) { return least / 4 > 2 ? least / 4 : 2; }

 private:
  void remember(uint64_t hash, int replica);

  int replicas_;
  size_t capacity_;
  std::list<uint64_t> order_;  // front = least recently routed
  struct Entry {
    uint64_t replicas;  // bit r: sent to replica r
    std::list<uint64_t>::iterator at;
  };
  std::unordered_map<uint64_t, Entry> where_;
};

}  // namespace dsv4
