#include "bench_client/bench_dataset.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "core/error.h"

namespace dsv4::bench {
namespace {

// Skip the first and last 1% of ids: special and control tokens sit there in most vocabularies.
std::uniform_int_distribution<int32_t> ordinary_ids(int32_t vocab_size) {
  DSV4_CHECK(vocab_size >= 100, "the vocabulary ({}) is too small for random prompts", vocab_size);
  return std::uniform_int_distribution<int32_t>(vocab_size / 100, vocab_size - vocab_size / 100 - 1);
}

std::vector<int32_t> random_ids(int64_t n, std::uniform_int_distribution<int32_t>& id, std::mt19937_64& rng) {
  std::vector<int32_t> out(static_cast<size_t>(n));
  for (int32_t& t : out) t = id(rng);
  return out;
}

}  // namespace

std::vector<BenchRequest> random_dataset(const RandomDatasetOptions& o) {
  DSV4_CHECK(o.num_prompts > 0, "--num-prompts must be positive");
  DSV4_CHECK(o.input_len > 0 && o.output_len > 0, "--random-input-len and --random-output-len must be positive");
  DSV4_CHECK(o.range_ratio >= 0 && o.range_ratio < 1, "--random-range-ratio must be in [0, 1)");
  std::mt19937_64 rng(o.seed);
  const auto lengths = [&](int64_t len) {
    const auto lo =
        std::max<int64_t>(1, static_cast<int64_t>(std::floor(static_cast<double>(len) * (1 - o.range_ratio))));
    const auto hi = std::max(lo, static_cast<int64_t>(std::ceil(static_cast<double>(len) * (1 + o.range_ratio))));
    return std::uniform_int_distribution<int64_t>(lo, hi);
  };
  auto in_len = lengths(o.input_len), out_len = lengths(o.output_len);
  auto id = ordinary_ids(o.vocab_size);
  std::vector<BenchRequest> out(static_cast<size_t>(o.num_prompts));
  for (BenchRequest& r : out) {
    r.prompt = random_ids(in_len(rng), id, rng);
    r.output_len = out_len(rng);
  }
  return out;
}

std::vector<BenchRequest> prefix_repetition_dataset(const PrefixRepetitionOptions& o) {
  DSV4_CHECK(o.num_prompts > 0 && o.num_prefixes > 0,
             "--num-prompts and --prefix-repetition-num-prefixes must be "
             "positive");
  DSV4_CHECK(o.prefix_len > 0 && o.suffix_len > 0 && o.output_len > 0,
             "--prefix-repetition-prefix-len, -suffix-len and -output-len must be positive");
  std::mt19937_64 rng(o.seed);
  auto id = ordinary_ids(o.vocab_size);
  std::vector<std::vector<int32_t>> prefixes;
  for (int64_t p = 0; p < o.num_prefixes; ++p) prefixes.push_back(random_ids(o.prefix_len, id, rng));
  std::vector<BenchRequest> out(static_cast<size_t>(o.num_prompts));
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].prompt = prefixes[i % prefixes.size()];
    const auto suffix = random_ids(o.suffix_len, id, rng);
    out[i].prompt.insert(out[i].prompt.end(), suffix.begin(), suffix.end());
    out[i].output_len = o.output_len;
  }
  std::shuffle(out.begin(), out.end(), rng);
  return out;
}

}  // namespace dsv4::bench
