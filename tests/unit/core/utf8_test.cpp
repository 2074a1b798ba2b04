#include "core/utf8.h"

#include <gtest/gtest.h>

#include <random>

namespace dsv4 {
namespace {

const std::string R = std::string(utf8::kReplacement);

TEST(Utf8, ValidText) {
  EXPECT_TRUE(utf8::is_valid(""));
  EXPECT_TRUE(utf8::is_valid("plain ascii, long enough to take the eight-byte path"));
  EXPECT_TRUE(utf8::is_valid("中文 😀 é \xEF\xBF\xBF \xF4\x8F\xBF\xBF"));
  EXPECT_FALSE(utf8::is_valid("\xFF"));
  EXPECT_FALSE(utf8::is_valid("abc\xE4\xB8"));
  EXPECT_FALSE(utf8::is_valid("\xED\xA0\x80"));  // a surrogate
  EXPECT_FALSE(utf8::is_valid("\xC0\xAF"));      // overlong
}

// Each case as Python's bytes.decode("utf-8", errors="replace") gives it.
TEST(Utf8, LossyReplacesMaximalSubparts) {
  EXPECT_EQ(utf8::lossy("\xFF"), R);
  EXPECT_EQ(utf8::lossy("abc\xE4\xB8"), "abc" + R);
  EXPECT_EQ(utf8::lossy("\xE4\xB8"
                        "abc"),
            R + "abc");
  EXPECT_EQ(utf8::lossy("\xED\xA0\x80"), R + R + R);
  EXPECT_EQ(utf8::lossy("\xC0\xAF"), R + R);
  EXPECT_EQ(utf8::lossy("\xF4\x90\x80\x80"), R + R + R + R);
  EXPECT_EQ(utf8::lossy("\xF0\x9F\x98"
                        "a\xF0\x9F\x98\x80"),
            R + "a\xF0\x9F\x98\x80");
  EXPECT_EQ(utf8::lossy("\xE0\x80\x80"), R + R + R);
  EXPECT_EQ(utf8::lossy("\xF1\x80\x80\xE1\x80\xC2"), R + R + R);
  EXPECT_EQ(utf8::lossy("ok"), "ok");
}

TEST(Utf8, AppendCompleteHoldsBackOnlyAPossiblyValidTail) {
  std::string out;
  EXPECT_EQ(utf8::append_complete("ab\xE4\xB8", out), 2u);
  EXPECT_EQ(out, "ab");
  out.clear();
  EXPECT_EQ(utf8::append_complete("\xF0\x9F\x98", out), 0u);
  EXPECT_EQ(out, "");
  EXPECT_EQ(utf8::append_complete("\xE4\xB8"
                                  "a",
                                  out),
            3u);  // proven invalid: replaced, not held
  EXPECT_EQ(out, R + "a");
  out.clear();
  EXPECT_EQ(utf8::append_complete("x\xFF", out), 2u);
  EXPECT_EQ(out, "x" + R);
}

TEST(Utf8, RandomBytesRepairToValidTextAndValidTextIsKept) {
  std::mt19937 rng(5);
  for (int n = 0; n < 2000; ++n) {
    std::string s(rng() % 40, '\0');
    for (char& c : s) c = static_cast<char>(rng() % 4 ? rng() % 256 : 0x80 + rng() % 64);
    const std::string fixed = utf8::lossy(s);
    ASSERT_TRUE(utf8::is_valid(fixed));
    EXPECT_EQ(utf8::lossy(fixed), fixed);
    EXPECT_EQ(utf8::is_valid(s), fixed == s);
    // Streaming in two parts gives the same text as one pass.
    const size_t cut = s.empty() ? 0 : rng() % s.size();
    std::string streamed;
    std::string held(s.substr(0, cut));
    held.erase(0, utf8::append_complete(held, streamed));
    held += s.substr(cut);
    utf8::append_lossy(held, streamed);
    EXPECT_EQ(streamed, fixed);
  }
}

TEST(Utf8, CodepointsRoundTrip) {
  for (const char32_t cp : {U'\0', U'a', U'\u00E9', U'\u4E2D', U'\U0001F600', U'\U0010FFFF'}) {
    std::string s;
    utf8::append_codepoint(cp, s);
    size_t i = 0;
    EXPECT_EQ(utf8::next_codepoint(s, i), cp);
    EXPECT_EQ(i, s.size());
    EXPECT_EQ(utf8::prev_codepoint(s, i), cp);
    EXPECT_EQ(i, 0u);
  }
}

}  // namespace
}  // namespace dsv4
