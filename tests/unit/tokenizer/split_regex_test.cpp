#include "tokenizer/split_regex.h"

#include <gtest/gtest.h>

#include <vector>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer_fixtures.h"

namespace dsv4 {
namespace {

using testing::error_of;
using Pieces = std::vector<std::string>;

Pieces split(const SplitRegex& re, std::string_view text) {
  Pieces out;
  re.split(text, [&](std::string_view p) { out.emplace_back(p); });
  return out;
}

Pieces pre_split(std::string_view text) {
  static const PreTokenizer pre = PreTokenizer::from_json(testing::deepseek_pre_tokenizer());
  Pieces out;
  pre.split(text, [&](std::string_view p) { out.emplace_back(p); });
  return out;
}

TEST(SplitRegex, IsolatedKeepsMatchesAndGaps) {
  const auto digits = SplitRegex::regex(R"(\p{N}{1,3})");
  EXPECT_EQ(split(digits, "ab 12340 cd"), (Pieces{"ab ", "123", "40", " cd"}));
  EXPECT_EQ(split(digits, "7"), (Pieces{"7"}));
  EXPECT_EQ(split(digits, "none"), (Pieces{"none"}));
  EXPECT_EQ(split(digits, ""), (Pieces{}));
}

TEST(SplitRegex, EmptyMatchesFollowOniguruma) {
  // An empty match right after a match is skipped; other empty matches cut the gaps into characters.
  EXPECT_EQ(split(SplitRegex::regex("x*"), "abxxc"), (Pieces{"a", "b", "xx", "c"}));
  EXPECT_EQ(split(SplitRegex::regex("(?=b)"), "abab"), (Pieces{"a", "ba", "b"}));
}

TEST(SplitRegex, DeepSeekPreTokenizer) {
  EXPECT_EQ(pre_split("Hello  world!! Привет, 世界\n\n  x"),
            (Pieces{"Hello", " ", " world", "!!", " Привет", ",", " ", "世界", "\n\n", " ", " x"}));
  EXPECT_EQ(pre_split("ab 12340 cd"), (Pieces{"ab", " ", "123", "40", " cd"}));
  EXPECT_EQ(pre_split("x.y=1;\r\n\tif"), (Pieces{"x", ".y", "=", "1", ";\r\n", "\tif"}));
}

TEST(SplitRegex, WhiteSpaceAndNewerUnicodeAsOniguruma) {
  // U+180E is not White_Space (PCRE2's own \s would take it), U+0085 is.
  EXPECT_EQ(pre_split("a\u180E\n"), (Pieces{"a", "\u180E", "\n"}));
  EXPECT_EQ(pre_split("a\u0085\n"), (Pieces{"a", "\u0085\n"}));
  // U+1FAE8 (Unicode 15) is a symbol, so it joins the "!" as punctuation/symbol run.
  EXPECT_EQ(pre_split("a\U0001FAE8!"), (Pieces{"a", "\U0001FAE8!"}));
}

TEST(SplitRegex, LiteralAndNativePatterns) {
  EXPECT_EQ(split(SplitRegex::literal("a.b"), "xa.bya.b"), (Pieces{"x", "a.b", "y", "a.b"}));
  EXPECT_EQ(split(SplitRegex::native(R"(\p{Alphabetic}+)"), "ab1c"), (Pieces{"ab", "1", "c"}));
  EXPECT_NE(error_of([] { SplitRegex::regex("(ab"); }).find("does not compile"), std::string::npos);
  EXPECT_EQ(error_of([] { SplitRegex::literal(""); }), "Split pattern is empty");
}

TEST(SplitRegex, HugePiecesDoNotExhaustTheStack) {
  const auto ws = SplitRegex::regex(R"(\s+(?!\S)|\s+)");
  const std::string spaces(1 << 20, ' ');
  EXPECT_EQ(split(ws, spaces + "x"), (Pieces{spaces.substr(1), " ", "x"}));
  const std::string letters(1 << 20, 'a');
  EXPECT_EQ(pre_split(letters), (Pieces{letters}));
}

}  // namespace
}  // namespace dsv4
