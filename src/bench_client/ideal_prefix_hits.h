// The prefix-cache hits a dataset allows at best, to compare a server's measured hit rate with: a prompt
// can be served from the cache up to the longest whole-block prefix it shares with a prompt sent before it
// (the warm-up prompts, then the dataset in order), never its last token (vLLM's and dsv4's rule: the last
// prompt token is always computed). An unbounded cache that keeps everything reaches it when requests
// run one at a time; concurrent requests sharing a prefix that no finished one has computed yet miss.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "bench_client/bench_dataset.h"

namespace dsv4::bench {

// Per request, in dataset order: the tokens an ideal cache serves. Requests without token ids (text
// prompts, tokenized by the server) get 0.
std::vector<int64_t> ideal_cached_tokens(std::span<const BenchRequest> requests,
                                         std::span<const BenchRequest> warmup = {}, int64_t block_tokens = 256);

}  // namespace dsv4::bench
