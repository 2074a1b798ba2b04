// The bench serve datasets: prefix_repetition's shape, the ideal prefix hits it allows, and JSONL files.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "bench_client/bench_dataset.h"
#include "bench_client/ideal_prefix_hits.h"
#include "bench_client/jsonl_dataset.h"
#include "testing/error_of.h"

namespace dsv4::bench {
namespace {

using ::dsv4::testing::error_of;

PrefixRepetitionOptions options(uint64_t seed) {
  return {.num_prompts = 24,
          .prefix_len = 700,
          .suffix_len = 90,
          .num_prefixes = 4,
          .output_len = 7,
          .vocab_size = 5000,
          .seed = seed};
}

TEST(PrefixRepetition, NPrefixesOfLTokensEquallyOftenShuffled) {
  const uint64_t seed = std::random_device{}();
  const auto o = options(seed);
  const auto a = prefix_repetition_dataset(o), b = prefix_repetition_dataset(o);
  ASSERT_EQ(a.size(), 24u);
  std::map<std::vector<int32_t>, int> uses;
  std::vector<std::vector<int32_t>> order;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].prompt.size(), 790u);
    EXPECT_EQ(a[i].output_len, 7);
    EXPECT_EQ(a[i].prompt, b[i].prompt) << "seed " << seed;
    for (const int32_t t : a[i].prompt) EXPECT_TRUE(t >= 50 && t < 4950);
    const std::vector<int32_t> prefix(a[i].prompt.begin(), a[i].prompt.begin() + 700);
    ++uses[prefix];
    order.push_back(prefix);
  }
  ASSERT_EQ(uses.size(), 4u);
  for (const auto& [p, n] : uses) EXPECT_EQ(n, 6);
  int changes = 0;  // a round-robin or grouped order would change prefix 23 or 3 times
  for (size_t i = 1; i < order.size(); ++i) changes += order[i] != order[i - 1];
  EXPECT_TRUE(changes != 23 && changes != 3) << "seed " << seed;
}

TEST(IdealPrefixHits, WholeSharedBlocksOfEarlierPromptsNeverTheLastToken) {
  const auto data = prefix_repetition_dataset(options(std::random_device{}()));
  const std::vector<BenchRequest> warm = {data[5]};
  const auto ideal = ideal_cached_tokens(data, warm);
  std::map<std::vector<int32_t>, bool> seen;
  seen[{data[5].prompt.begin(), data[5].prompt.begin() + 700}] = true;
  for (size_t i = 0; i < data.size(); ++i) {
    const std::vector<int32_t> prefix(data[i].prompt.begin(), data[i].prompt.begin() + 700);
    // 700 shared tokens are two whole blocks; data[5] itself was sent whole as the warm-up (3 blocks).
    const int64_t want = i == 5 ? 768 : seen[prefix] ? 512 : 0;
    EXPECT_EQ(ideal[i], want) << i;
    seen[prefix] = true;
  }
  // A prompt of exactly two blocks sent twice: the second serves one block (its last token is computed).
  BenchRequest two;
  two.prompt.assign(512, 77);
  EXPECT_EQ(ideal_cached_tokens(std::vector<BenchRequest>{two, two}), (std::vector<int64_t>{0, 256}));
  BenchRequest text;
  text.text = "hello";
  EXPECT_EQ(ideal_cached_tokens(std::vector<BenchRequest>{text, text}), (std::vector<int64_t>{0, 0}));
}

TEST(JsonlDataset, TextIdsOutputTokensAndErrorsByLine) {
  const auto d = parse_jsonl_dataset(
      "{\"prompt\": \"Tell me a story\"}\n\n{\"prompt\": [5, 6, 7], \"output_tokens\": 3}\r\n", 64, "f.jsonl");
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].text, "Tell me a story");
  EXPECT_TRUE(d[0].prompt.empty());
  EXPECT_EQ(d[0].output_len, 64);
  EXPECT_EQ(d[1].prompt, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(d[1].output_len, 3);
  EXPECT_EQ(error_of([] { parse_jsonl_dataset("{\"prompt\": \"a\"}\n{\"text\": \"b\"}\n", 8, "f.jsonl"); }),
            "f.jsonl line 2: not a JSON object with a \"prompt\"");
  EXPECT_EQ(error_of([] { parse_jsonl_dataset("{\"prompt\": [1, -2]}\n", 8, "f.jsonl"); }),
            "f.jsonl line 1: token ids must be non-negative integers");
  EXPECT_EQ(error_of([] { parse_jsonl_dataset("\n\n", 8, "f.jsonl"); }), "f.jsonl has no prompts");
}

}  // namespace
}  // namespace dsv4::bench
