#include "bench_client/bench_dataset.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "core/error.h"

namespace dsv4::bench {

std::vector<BenchRequest> random_dataset(const RandomDatasetOptions& o) {
  DSV4_CHECK(o.num_prompts > 0, "--num-prompts must be positive");
  DSV4_CHECK(o.input_len > 0 && o.output_len > 0, "--random-input-len and --random-output-len must be positive");
  DSV4_CHECK(o.range_ratio >= 0 && o.range_ratio < 1, "--random-range-ratio must be in [0, 1)");
  DSV4_CHECK(o.vocab_size >= 100, "the vocabulary ({}) is too small for random prompts", o.vocab_size);
  std::mt19937_64 rng(o.seed);
  const auto lengths = [&](int64_t len) {
    const auto lo =
        std::max<int64_t>(1, static_cast<int64_t>(std::floor(static_cast<double>(len) * (1 - o.range_ratio))));
    const auto hi = std::max(lo, static_cast<int64_t>(std::ceil(static_cast<double>(len) * (1 + o.range_ratio))));
    return std::uniform_int_distribution<int64_t>(lo, hi);
  };
  auto in_len = lengths(o.input_len), out_len = lengths(o.output_len);
  // Skip the first and last 1% of ids: special and control tokens sit there in most vocabularies.
  std::uniform_int_distribution<int32_t> id(o.vocab_size / 100, o.vocab_size - o.vocab_size / 100 - 1);
  std::vector<BenchRequest> out(static_cast<size_t>(o.num_prompts));
  for (BenchRequest& r : out) {
    r.prompt.resize(static_cast<size_t>(in_len(rng)));
    for (int32_t& t : r.prompt) t = id(rng);
    r.output_len = out_len(rng);
  }
  return out;
}

}  // namespace dsv4::bench
