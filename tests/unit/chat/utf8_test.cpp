// The chat room's UTF-8 repair is core/utf8.h's (maximal subparts, as Python's errors="replace"): the
// JSON it writes for clients (tool-call arguments) and tool-call names carry U+FFFD where the model's
// bytes are broken, one per maximal subpart.
#include "core/utf8.h"

#include <gtest/gtest.h>

#include <random>

#include "chat/completion_parser.h"
#include "chat/python_json.h"

namespace dsv4::chat {
namespace {

// python_json_quote's repair, case by case as Python: b.decode("utf-8", errors="replace").
TEST(ChatUtf8, JsonQuotingRepairsMaximalSubparts) {
  EXPECT_EQ(python_json_quote("x\xFFy"), "\"x\uFFFDy\"");
  EXPECT_EQ(python_json_quote("a\xE4\xB8"
                              "b\xE4\xB8\xAD"),
            "\"a\uFFFDb中\"");                                             // a truncated character: one
  EXPECT_EQ(python_json_quote("\xE0\x80\xAF"), "\"\uFFFD\uFFFD\uFFFD\"");  // overlong: three
  EXPECT_EQ(python_json_quote("\xED\xA0\x80"), "\"\uFFFD\uFFFD\uFFFD\"");  // a surrogate: three
  EXPECT_EQ(python_json_quote("\xF0\x9F\x98"), "\"\uFFFD\"");              // truncated emoji: one
  EXPECT_EQ(python_json_quote("\xE2\x82\xAC\xE2\x82"), "\"€\uFFFD\"");
  EXPECT_EQ(python_json_quote("tab\there"), "\"tab\\there\"");  // escapes unchanged
}

// Random bytes: the quoted text is valid UTF-8 and equals quoting the repaired text.
TEST(ChatUtf8, JsonQuotingOfRandomBytesIsValid) {
  std::mt19937 rng(5);
  for (int i = 0; i < 2000; ++i) {
    std::string s;
    const size_t n = rng() % 24;
    for (size_t j = 0; j < n; ++j) s += static_cast<char>(rng() % 256);
    const std::string q = python_json_quote(s);
    ASSERT_TRUE(utf8::is_valid(q));
    ASSERT_EQ(q, python_json_quote(utf8::lossy(s)));
  }
}

}  // namespace
}  // namespace dsv4::chat
