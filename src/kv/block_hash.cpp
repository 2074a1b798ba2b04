#include "kv/block_hash.h"

#include <xxhash.h>

#include <algorithm>

#include "kv/kv_group.h"

namespace dsv4 {

uint64_t prefix_hash_seed(std::string_view cache_salt) {
  constexpr uint64_t kNoSalt = 0x6473763470726566ull;  // "dsv4pref"
  return cache_salt.empty() ? kNoSalt : XXH3_64bits_withSeed(cache_salt.data(), cache_salt.size(), kNoSalt);
}

void extend_block_hashes(std::vector<uint64_t>& hashes, std::span<const int32_t> tokens, uint64_t seed,
                         size_t max_blocks) {
  const size_t complete = std::min(tokens.size() / kKvBlockTokens, max_blocks);
  for (size_t j = hashes.size(); j < complete; ++j) {
    const int32_t* block = tokens.data() + j * kKvBlockTokens;
    hashes.push_back(XXH3_64bits_withSeed(block, kKvBlockTokens * sizeof(int32_t), j == 0 ? seed : hashes[j - 1]));
  }
}

uint64_t page_key(uint64_t block_hash, int unit, int64_t page_in_block) {
  const int64_t tag[2] = {unit, page_in_block};
  return XXH3_64bits_withSeed(tag, sizeof(tag), block_hash);
}

}  // namespace dsv4
