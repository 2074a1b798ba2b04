#include "tokenizer/oniguruma_compat.h"

#include <gtest/gtest.h>

#include "tokenizer_fixtures.h"

namespace dsv4 {
namespace {

using testing::error_of;

TEST(OnigurumaCompat, WhiteSpaceAndUnicodeEscapes) {
  EXPECT_EQ(oniguruma_to_pcre2(R"(\s+(?!\S))"), R"(\p{White_Space}+(?!\P{White_Space}))");
  EXPECT_EQ(oniguruma_to_pcre2(R"([^\s\p{Z}])"), R"([^\p{White_Space}\p{Z}])");
  EXPECT_EQ(oniguruma_to_pcre2(R"(\u00e9x)"), R"(\x{00e9}x)");
  EXPECT_EQ(oniguruma_to_pcre2(R"([\[\]\-\\]\t\x{41})"), R"([\[\]\-\\]\t\x{41})");
  EXPECT_EQ(oniguruma_to_pcre2("[]a]"), "[]a]");
}

TEST(OnigurumaCompat, CategoriesGainTheCodepointsOfNewerUnicode) {
  const std::string outside = oniguruma_to_pcre2(R"(\p{S})");
  EXPECT_EQ(outside.substr(0, 6), R"([\p{S})");
  EXPECT_NE(outside.find(R"(\x{1FAE8}-\x{1FAE9})"), std::string::npos) << outside;  // emoji of Unicode 15-16
  EXPECT_EQ(outside.back(), ']');
  const std::string negated = oniguruma_to_pcre2(R"(\P{L})");
  EXPECT_EQ(negated.substr(0, 7), R"([^\p{L})");
  const std::string inside = oniguruma_to_pcre2(R"([^\r\n\p{L}])");
  EXPECT_EQ(inside.substr(0, 12), R"([^\r\n\p{L}\)");
  EXPECT_NE(inside.find(R"(\x{31350}-\x{323AF})"), std::string::npos);  // CJK extension H
  EXPECT_EQ(oniguruma_to_pcre2(R"(\pN\p{Z})").substr(0, 6), R"([\p{N})");
}

TEST(OnigurumaCompat, RefusesWhatTheEnginesReadDifferently) {
  const auto msg = [](const char* p) { return error_of([&] { oniguruma_to_pcre2(p); }); };
  EXPECT_EQ(msg(R"(\w+)"),
            R"(Split regex "\\w+": the escape \w is not supported (its meaning differs between Oniguruma and PCRE2))");
  EXPECT_EQ(msg(R"(\d)"),
            R"(Split regex "\\d": the escape \d is not supported (its meaning differs between Oniguruma and PCRE2))");
  EXPECT_EQ(msg(R"([\P{L}])"), R"(Split regex "[\\P{L}]": \P{L} inside a character class is not supported )"
                               R"((its meaning differs between Oniguruma and PCRE2))");
  EXPECT_NE(msg(R"(\p{Lu})").find(R"(the Unicode property \p{Lu} (supported: L M N P S Z))"), std::string::npos);
  EXPECT_NE(msg("[a[b]]").find("a nested character class"), std::string::npos);
  EXPECT_NE(msg("[[:alpha:]]").find("a POSIX class"), std::string::npos);
  EXPECT_NE(msg("[a-z&&[^c]]").find("class intersection &&"), std::string::npos);
  EXPECT_NE(msg("[abc").find("an unterminated character class"), std::string::npos);
  EXPECT_NE(msg("ab\\").find("a trailing backslash"), std::string::npos);
  EXPECT_NE(msg(R"(\u12)").find("a short \\u escape"), std::string::npos);
}

}  // namespace
}  // namespace dsv4
