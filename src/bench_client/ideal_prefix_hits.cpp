#include "bench_client/ideal_prefix_hits.h"

#include <algorithm>
#include <unordered_set>

#include "core/error.h"

namespace dsv4::bench {
namespace {

// Chained block hashes: hash k names the first k + 1 blocks, as a prefix cache names them.
std::vector<uint64_t> block_chain(const std::vector<int32_t>& ids, int64_t block_tokens) {
  std::vector<uint64_t> out;
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (size_t end = static_cast<size_t>(block_tokens); end <= ids.size(); end += static_cast<size_t>(block_tokens)) {
    for (size_t i = end - static_cast<size_t>(block_tokens); i < end; ++i) {
      h ^= static_cast<uint64_t>(static_cast<uint32_t>(ids[i])) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    }
    out.push_back(h);
  }
  return out;
}

}  // namespace

std::vector<int64_t> ideal_cached_tokens(std::span<const BenchRequest> requests, std::span<const BenchRequest> warmup,
                                         int64_t block_tokens) {
  DSV4_CHECK(block_tokens > 0, "the block size must be positive");
  std::unordered_set<uint64_t> seen;
  const auto remember = [&](const std::vector<uint64_t>& chain) { seen.insert(chain.begin(), chain.end()); };
  for (const BenchRequest& r : warmup) remember(block_chain(r.prompt, block_tokens));
  std::vector<int64_t> out;
  out.reserve(requests.size());
  for (const BenchRequest& r : requests) {
    const std::vector<uint64_t> chain = block_chain(r.prompt, block_tokens);
    // Blocks that end at or before the last prompt token may be served; the last token is computed.
    const auto usable =
        std::min(chain.size(), static_cast<size_t>((static_cast<int64_t>(r.prompt.size()) - 1) / block_tokens));
    size_t hit = 0;
    while (hit < usable && seen.count(chain[hit])) ++hit;
    out.push_back(static_cast<int64_t>(hit) * block_tokens);
    remember(chain);
  }
  return out;
}

}  // namespace dsv4::bench
