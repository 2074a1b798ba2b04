// Prefix-cache identities. A full 256-token block is named by a chained xxHash (XXH3-64): block j hashes
// its token ids with block j−1's hash as the seed, and block 0 is seeded from the request's cache salt,
// so equal hashes mean equal token prefixes (and equal salts). Pages of a unit are keyed from the hash of
// the block that contains them, the unit and the page's place in that block.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace dsv4 {

// Seed of block 0 for a cache salt ("" = no salt, the same seed for everyone).
uint64_t prefix_hash_seed(std::string_view cache_salt);

// Appends the hashes of the complete blocks of `tokens` that `hashes` does not hold yet
// (hashes[j] names tokens [0, 256·(j+1))); stops at `max_blocks` hashes.
void extend_block_hashes(std::vector<uint64_t>& hashes, std::span<const int32_t> tokens, uint64_t seed,
                         size_t max_blocks = SIZE_MAX);

// Key of one page: the hash of the block that holds it, the unit and the page's index within that block.
uint64_t page_key(uint64_t block_hash, int unit, int64_t page_in_block);

}  // namespace dsv4
