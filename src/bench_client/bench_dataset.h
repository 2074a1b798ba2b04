// The generated benchmark datasets, as vLLM's `bench serve` names them, reproducible from the seed. Prompts
// are token ids, sent as ids so that the server sees exactly the requested lengths.
// - random: prompts and output lengths drawn in [len x (1 - ratio), len x (1 + ratio)].
// - prefix_repetition: N shared prefixes of L tokens, each followed by its own random suffix (agent traffic
//   re-sending long shared contexts); the prompts of each prefix are equally many, in shuffled order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dsv4::bench {

struct BenchRequest {
  std::vector<int32_t> prompt;  // token ids; sent as ids on /v1/completions
  std::string text;             // or text (file datasets; chat turns ids into text): sent when not empty
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

struct PrefixRepetitionOptions {
  int64_t num_prompts = 1000;
  int64_t prefix_len = 256;   // L: tokens every prompt of a prefix shares
  int64_t suffix_len = 256;   // each prompt's own tokens after it
  int64_t num_prefixes = 10;  // N
  int64_t output_len = 128;
  int32_t vocab_size = 32000;
  uint64_t seed = 0;
};

std::vector<BenchRequest> random_dataset(const RandomDatasetOptions& o);
std::vector<BenchRequest> prefix_repetition_dataset(const PrefixRepetitionOptions& o);

}  // namespace dsv4::bench
