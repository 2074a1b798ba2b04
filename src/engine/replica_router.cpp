#include "engine/replica_router.h"

#include <algorithm>

#include "core/error.h"
#include "kv/block_hash.h"

namespace dsv4 {

ReplicaRouter::ReplicaRouter(int replicas, size_t capacity) : replicas_(replicas), capacity_(capacity) {
  DSV4_CHECK(replicas >= 1 && capacity >= 1, "replica router: {} replicas, {} blocks", replicas, capacity);
}

ReplicaRouter::Match ReplicaRouter::longest(std::span<const uint64_t> hashes) const {
  Match m;
  // A remembered block's prefix was remembered with it (same prompt), so the last hit is the longest.
  for (size_t j = hashes.size(); j-- > 0;) {
    const auto it = where_.find(hashes[j]);
    if (it == where_.end()) continue;
    m.replica = it->second.replica;
    m.blocks = j + 1;
    break;
  }
  return m;
}

int ReplicaRouter::route(std::span<const int32_t> prompt, std::string_view cache_salt, std::span<const size_t> loads) {
  DSV4_CHECK(loads.size() == static_cast<size_t>(replicas_), "replica router: {} loads for {} replicas", loads.size(),
             replicas_);
  const auto least = static_cast<int>(std::min_element(loads.begin(), loads.end()) - loads.begin());
  std::vector<uint64_t> hashes;
  extend_block_hashes(hashes, prompt, prefix_hash_seed(cache_salt));
  const Match m = longest(hashes);
  const auto lightest = loads[static_cast<size_t>(least)];
  const int chosen =
      m.replica >= 0 && loads[static_cast<size_t>(m.replica)] <= lightest + margin(lightest) ? m.replica : least;
  for (const uint64_t h : hashes) remember(h, chosen);
  return chosen;
}

void ReplicaRouter::remember(uint64_t hash, int replica) {
  const auto it = where_.find(hash);
  if (it != where_.end()) {
    it->second.replica = replica;
    order_.splice(order_.end(), order_, it->second.at);
    return;
  }
  if (where_.size() == capacity_) {
    where_.erase(order_.front());
    order_.pop_front();
  }
  order_.push_back(hash);
  where_.emplace(hash, Entry{replica, std::prev(order_.end())});
}

}  // namespace dsv4
