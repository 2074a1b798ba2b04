#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>

#include "tokenizer_fixtures.h"

namespace dsv4 {
namespace {

using testing::tiny_tokenizer;
using Ids = std::vector<int32_t>;

TEST(Bpe, LowestRankMergesFirst) {
  // Ranks: (b,c)=0 -> 256, (a,b)=1 -> 257, (a,bc)=2 -> 258.
  const Tokenizer tok = tiny_tokenizer({{"b", "c"}, {"a", "b"}, {"a", "bc"}});
  EXPECT_EQ(tok.encode("abc"), (Ids{258}));  // bc first, then a+bc
  EXPECT_EQ(tok.encode("ab"), (Ids{257}));
  EXPECT_EQ(tok.encode("abd"), (Ids{257, 'd'}));
  EXPECT_EQ(tok.encode("x"), (Ids{'x'}));
}

TEST(Bpe, TiesGoToTheLeftmostPair) {
  const Tokenizer tok = tiny_tokenizer({{"a", "a"}});
  EXPECT_EQ(tok.encode("aaa"), (Ids{256, 'a'}));
  EXPECT_EQ(tok.encode("aaaaa"), (Ids{256, 256, 'a'}));
}

TEST(Bpe, MergedPairsFormNewCandidates) {
  const Tokenizer tok = tiny_tokenizer({{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {" ", "hello"}});
  EXPECT_EQ(tok.encode(" hello hello"), (Ids{260, 260}));
  EXPECT_EQ(tok.encode("hello"), (Ids{259}));
  EXPECT_EQ(tok.decode(tok.encode(" hello hellish")), " hello hellish");
}

TEST(Bpe, CachedResultsEqualFreshOnesAcrossThreads) {
  const Tokenizer tok = tiny_tokenizer({{"t", "h"}, {"th", "e"}, {" ", "the"}, {"e", "r"}, {" ", "t"}});
  std::mt19937 rng(3);
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i) {
    std::string s;
    for (int k = 0; k < 30; ++k) s += "the there ther t e r x"[rng() % 22];
    texts.push_back(s);
  }
  std::vector<Ids> first;
  for (const auto& t : texts) first.push_back(tok.encode(t));
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int rep = 0; rep < 5; ++rep)
        for (size_t i = 0; i < texts.size(); ++i)
          if (tok.encode(texts[i]) != first[i]) ++mismatches;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(tok.decode(first[i]), texts[i]);
}

TEST(Bpe, LongWordsBypassTheCache) {
  const Tokenizer tok = tiny_tokenizer({{"a", "b"}, {"ab", "ab"}});
  std::string word;
  for (int i = 0; i < 1000; ++i) word += "ab";
  const Ids ids = tok.encode(word);
  EXPECT_EQ(ids, Ids(500, 257));
  EXPECT_EQ(tok.encode(word), ids);
}

}  // namespace
}  // namespace dsv4
