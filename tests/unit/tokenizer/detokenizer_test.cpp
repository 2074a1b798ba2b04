#include "tokenizer/detokenizer.h"

#include <gtest/gtest.h>

#include <random>

#include "tokenizer_fixtures.h"

namespace dsv4 {
namespace {

const std::string R = std::string(utf8::kReplacement);

// Byte tokens only, so any byte sequence (and any broken UTF-8) can be streamed.
const Tokenizer& bytes_tokenizer() {
  static const Tokenizer tok = testing::tiny_tokenizer({{"\xE4", "\xB8"}}, {{"<s>", 300}, {"<t>", 301, false, true}});
  return tok;
}

TEST(Detokenizer, HoldsBackIncompleteCharacters) {
  Detokenizer d(bytes_tokenizer());
  EXPECT_EQ(d.push('a'), "a");
  EXPECT_EQ(d.push(256), "");  // E4 B8: two bytes of 中
  EXPECT_EQ(d.pending(), 2u);
  EXPECT_EQ(d.push(0xAD), "中");
  EXPECT_EQ(d.push(0xF0), "");
  EXPECT_EQ(d.push(0x9F), "");
  EXPECT_EQ(d.push(0x98), "");
  EXPECT_EQ(d.push(0x80), "😀");
  EXPECT_EQ(d.pending(), 0u);
}

TEST(Detokenizer, InvalidSequencesAreReplacedAsSoonAsTheyAreKnown) {
  Detokenizer d(bytes_tokenizer());
  EXPECT_EQ(d.push(0xE4), "");
  EXPECT_EQ(d.push('x'), R + "x");
  EXPECT_EQ(d.push(0xFF), R);
  EXPECT_EQ(d.push(0xF0), "");
  EXPECT_EQ(d.finish(), R);  // an incomplete tail at the end
  EXPECT_EQ(d.pending(), 0u);
}

TEST(Detokenizer, SpecialTokensCanBeSkipped) {
  Detokenizer keep(bytes_tokenizer());
  EXPECT_EQ(keep.push(300), "<s>");
  Detokenizer skip(bytes_tokenizer(), /*skip_special=*/true);
  EXPECT_EQ(skip.push(300), "");
  EXPECT_EQ(skip.push(301), "<t>");  // not special
  EXPECT_EQ(testing::error_of([&] { skip.push(302); }), "token id 302 is out of range [0, 302)");
  EXPECT_EQ(testing::error_of([&] { skip.push(-1); }), "token id -1 is out of range [0, 302)");
}

TEST(Detokenizer, StreamEqualsDecodeForRandomIds) {
  const Tokenizer& tok = bytes_tokenizer();
  std::mt19937 rng(17);
  for (int n = 0; n < 500; ++n) {
    std::vector<int32_t> ids(rng() % 30);
    for (auto& id : ids) id = rng() % 3 ? 0x80 + rng() % 0x80 : rng() % 257;
    Detokenizer d(tok);
    std::string streamed;
    for (const int32_t id : ids) {
      d.push(id, streamed);
      ASSERT_TRUE(utf8::is_valid(streamed));
    }
    d.finish(streamed);
    EXPECT_EQ(streamed, tok.decode(ids));
  }
}

}  // namespace
}  // namespace dsv4
