// Stop strings over streamed text: matches across delta boundaries, minimal hold-back, any split of the text
// gives the same output; OutputText with the real tokenizer never splits a UTF-8 character.
#include "server/stop_matcher.h"

#include <gtest/gtest.h>

#include <random>

#include "server/output_text.h"
#include "server_test_support.h"

namespace dsv4::server {
namespace {

std::string feed_all(StopMatcher& m, const std::vector<std::string>& deltas) {
  std::string out;
  for (const auto& d : deltas) out += m.push(d);
  return out + m.flush();
}

TEST(StopMatcher, NoStopsPassesEverythingAtOnce) {
  StopMatcher m({});
  EXPECT_EQ(m.push("abc"), "abc");
  EXPECT_EQ(m.flush(), "");
  EXPECT_FALSE(m.matched());
}

TEST(StopMatcher, MatchAcrossDeltasCutsBeforeTheStop) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.push("hello S"), "hello ");  // "S" could start the stop string
  EXPECT_EQ(m.held(), 1u);
  EXPECT_EQ(m.push("TO"), "");
  EXPECT_EQ(m.push("Px"), "");
  EXPECT_TRUE(m.matched());
  EXPECT_EQ(m.matched_stop(), "STOP");
  EXPECT_EQ(m.push("more"), "");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, FalseStartIsReleased) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.push("ST"), "");
  EXPECT_EQ(m.push("AR"), "STAR");
  EXPECT_EQ(m.push("S"), "");
  EXPECT_EQ(m.flush(), "S");
  EXPECT_FALSE(m.matched());
}

TEST(StopMatcher, IncludeStopAndEarliestLongestMatch) {
  StopMatcher inc({"b", "abc"}, /*include_stop=*/true);
  EXPECT_EQ(inc.push("xxabcd"), "xxabc");  // "abc" starts first
  EXPECT_EQ(inc.matched_stop(), "abc");
  StopMatcher same({"ab", "abc"});
  EXPECT_EQ(same.push("zabcz"), "z");
  EXPECT_EQ(same.matched_stop(), "abc");  // same start: the longest
}

TEST(StopMatcher, AnySplitGivesTheSameOutput) {
  const std::string text = "The end is near</end> but not here</end> ok";
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::string> deltas;
    for (size_t i = 0; i < text.size();) {
      const size_t n = 1 + rng() % 5;
      deltas.push_back(text.substr(i, n));
      i += n;
    }
    StopMatcher m({"</end>", "nope"});
    EXPECT_EQ(feed_all(m, deltas), "The end is near");
    EXPECT_TRUE(m.matched());
  }
}

TEST(OutputText, StopStringsOnDetokenizedTextKeepCharactersWhole) {
  DSV4_REQUIRE_TOKENIZER();
  const Tokenizer& tok = *servertest::real_tokenizer();
  const std::string text = "价格是 5 元。然后停止这里不应出现";
  const std::vector<int32_t> ids = tok.encode(text);
  OutputText out(tok, false, {"停止"}, false);
  std::string got;
  for (const int32_t id : ids) {
    const std::string piece = out.push(id);
    // Every piece is valid UTF-8 on its own.
    EXPECT_EQ(tok.decode(tok.encode(piece)), piece);
    got += piece;
  }
  got += out.finish();
  EXPECT_TRUE(out.stopped());
  EXPECT_EQ(got, "价格是 5 元。然后");
}

TEST(OutputText, SkipSpecialTokensAndFinishFlushes) {
  DSV4_REQUIRE_TOKENIZER();
  const Tokenizer& tok = *servertest::real_tokenizer();
  std::vector<int32_t> ids = tok.encode("Hi there");
  ids.insert(ids.begin(), 0);  // BOS, special
  OutputText skip(tok, true, {"zzz"}, false);
  std::string got;
  for (const int32_t id : ids) got += skip.push(id);
  got += skip.finish();
  EXPECT_EQ(got, "Hi there");
  EXPECT_FALSE(skip.stopped());
}

}  // namespace
}  // namespace dsv4::server
