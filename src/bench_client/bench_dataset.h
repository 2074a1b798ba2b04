// vLLM's "random" benchmark dataset: prompts of random token ids (sent as ids, so the server sees exactly
// the requested input length) and output lengths, both drawn in [len x (1 - ratio), len x (1 + ratio)]
// (--random-range-ratio), reproducible from the seed.
#pragma once

#include <cstdint>
#include <vector>

namespace dsv4::bench {

struct BenchRequest {
  std::vector<int32_t> prompt;
  int64_t output_len = 0;
};

struct RandomDatasetOptions {
  int64_t num_prompts = 1000;
  int64_t input_len = 1024;
  int64_t output_len = 128;
  double range_ratio = 0;
  int32_t vocab_size = 32000;  // ids are drawn from the ordinary part of it (not the first or last 1%)
  uint64_t seed = 0;
};

std::vector<BenchRequest> random_dataset(const RandomDatasetOptions& o);

}  // namespace dsv4::bench
