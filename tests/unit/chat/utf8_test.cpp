#include "chat/utf8.h"

#include <gtest/gtest.h>

#include <random>

#include "chat/python_json.h"

namespace dsv4::chat {
namespace {

TEST(Utf8, CharLength) {
  EXPECT_EQ(utf8_char_length("a"), 1u);
  EXPECT_EQ(utf8_char_length("é"), 2u);
  EXPECT_EQ(utf8_char_length("中"), 3u);
  EXPECT_EQ(utf8_char_length("😀"), 4u);
  EXPECT_EQ(utf8_char_length(""), 0u);
  EXPECT_EQ(utf8_char_length("\x80"), 0u);              // lone continuation
  EXPECT_EQ(utf8_char_length("\xC0\xAF"), 0u);          // overlong '/'
  EXPECT_EQ(utf8_char_length("\xE0\x80\xAF"), 0u);      // overlong
  EXPECT_EQ(utf8_char_length("\xED\xA0\x80"), 0u);      // surrogate U+D800
  EXPECT_EQ(utf8_char_length("\xF4\x90\x80\x80"), 0u);  // beyond U+10FFFF
  EXPECT_EQ(utf8_char_length("\xE4\xB8"), 0u);          // truncated
}

TEST(Utf8, ToValidReplacesBrokenBytes) {
  EXPECT_EQ(to_valid_utf8("a\xE4\xB8"
                          "b中"),
            "a\uFFFD\uFFFDb中");
  EXPECT_EQ(python_json_quote("x\xFFy"), "\"x\uFFFDy\"");
}

// Random bytes: the result is valid, and valid input is unchanged.
TEST(Utf8, RandomBytes) {
  std::mt19937 rng(5);
  for (int i = 0; i < 2000; ++i) {
    std::string s;
    const size_t n = rng() % 24;
    for (size_t j = 0; j < n; ++j) s += static_cast<char>(rng() % 256);
    const std::string v = to_valid_utf8(s);
    for (size_t at = 0; at < v.size();) {
      const size_t len = utf8_char_length(std::string_view(v).substr(at));
      ASSERT_GT(len, 0u);
      at += len;
    }
    ASSERT_EQ(to_valid_utf8(v), v);
  }
}

}  // namespace
}  // namespace dsv4::chat
