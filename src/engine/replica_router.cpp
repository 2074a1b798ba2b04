#include "engine/replica_router.h"

#include <algorithm>

#include "core/error.h"
#include "kv/block_hash.h"

namespace dsv4 {

ReplicaRouter::ReplicaRouter(int replicas, size_t capacity) : replicas_(replicas), capacity_(capacity) {
  DSV4_CHECK(replicas >= 1 && replicas <= kMaxReplicas && capacity >= 1, "replica router: {} replicas, {} blocks",
             replicas, capacity);
}

std::vector<size_t> ReplicaRouter::matched(std::span<const uint64_t> hashes) const {
  std::vector<size_t> blocks(static_cast<size_t>(replicas_), 0);
  uint64_t open = (replicas_ == 64 ? ~uint64_t{0} : (uint64_t{1} << replicas_) - 1);  // replicas without a match yet
  // A block's hash names its whole prefix, so a replica's longest match is its last block present.
  for (size_t j = hashes.size(); j-- > 0 && open != 0;) {
    const auto it = where_.find(hashes[j]);
    if (it == where_.end()) continue;
    for (uint64_t found = it->second.replicas & open; found != 0; found &= found - 1)
      blocks[static_cast<size_t>(__builtin_ctzll(found))] = j + 1;
    open &= ~it->second.replicas;
  }
  return blocks;
}

std::vector<uint64_t> ReplicaRouter::block_hashes(std::span<const int32_t> prompt, std::string_view cache_salt) {
  std::vector<uint64_t> hashes;
  extend_block_hashes(hashes, prompt, prefix_hash_seed(cache_salt));
  return hashes;
}

int ReplicaRouter::route(std::span<const uint64_t> hashes, std::span<const size_t> loads) {
  DSV4_CHECK(loads.size() == static_cast<size_t>(replicas_), "replica router: {} loads for {} replicas", loads.size(),
             replicas_);
  const auto least = static_cast<int>(std::min_element(loads.begin(), loads.end()) - loads.begin());
  const size_t bound = loads[static_cast<size_t>(least)] + margin(loads[static_cast<size_t>(least)]);
  const std::vector<size_t> blocks = matched(hashes);
  int chosen = least;
  for (int r = 0; r < replicas_; ++r) {  // the longest match within the bound; the lighter one on a tie
    const auto i = static_cast<size_t>(r), c = static_cast<size_t>(chosen);
    if (loads[i] > bound || blocks[i] < blocks[c] || (blocks[i] == blocks[c] && loads[i] >= loads[c])) continue;
    chosen = r;
  }
  for (const uint64_t h : hashes) remember(h, chosen);
  return chosen;
}

void ReplicaRouter::remember(uint64_t hash, int replica) {
  const uint64_t bit = uint64_t{1} << replica;
  const auto it = where_.find(hash);
  if (it != where_.end()) {
    it->second.replicas |= bit;
    order_.splice(order_.end(), order_, it->second.at);
    return;
  }
  if (where_.size() == capacity_) {
    where_.erase(order_.front());
    order_.pop_front();
  }
  order_.push_back(hash);
  where_.emplace(hash, Entry{bit, std::prev(order_.end())});
}

}  // namespace dsv4
