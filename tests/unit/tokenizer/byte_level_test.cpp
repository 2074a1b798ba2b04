#include "tokenizer/byte_level.h"

#include <gtest/gtest.h>

#include <set>

namespace dsv4 {
namespace {

TEST(ByteLevel, EveryByteHasItsOwnPrintableCodepoint) {
  std::set<char32_t> seen;
  for (int b = 0; b < 256; ++b) {
    const char32_t cp = byte_level::byte_to_codepoint(static_cast<uint8_t>(b));
    EXPECT_TRUE(seen.insert(cp).second);
    EXPECT_EQ(byte_level::codepoint_to_byte(cp), b);
  }
  EXPECT_EQ(byte_level::byte_to_codepoint(' '), U'\u0120');   // Ġ
  EXPECT_EQ(byte_level::byte_to_codepoint('\n'), U'\u010A');  // Ċ
  EXPECT_EQ(byte_level::byte_to_codepoint('A'), U'A');
  EXPECT_EQ(byte_level::byte_to_codepoint(0xAD), U'\u0143');
  EXPECT_EQ(byte_level::codepoint_to_byte(U'\uFF5C'), -1);
}

TEST(ByteLevel, EncodeDecodeRoundTrip) {
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  EXPECT_EQ(byte_level::decode_token(byte_level::encode(all)), all);
  EXPECT_EQ(byte_level::encode(" the"), "\xC4\xA0the");
}

TEST(ByteLevel, TokensOutsideTheAlphabetDecodeToThemselves) {
  EXPECT_EQ(byte_level::decode_token("<｜User｜>"), "<｜User｜>");
  EXPECT_EQ(byte_level::decode_token("<think>"), "<think>");
  EXPECT_EQ(byte_level::decode_token("caf\xC3\xA9"), "caf\xE9");  // é is byte 0xE9 in the alphabet
}

}  // namespace
}  // namespace dsv4
