// Regexes against PCRE2 as the oracle: random texts (random walks through the masks, so that matches
// are common, and random strings over the pattern's alphabet, so that non-matches are) are accepted by
// the grammar exactly when PCRE2 matches the whole text.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "grammar/regex.h"

#include <pcre2.h>

#include "core/utf8.h"
#include "grammar_testing.h"
#include "testing/error_of.h"

namespace dsv4::grammar {
namespace {

using testing::accepts;
using testing::compile;

class Pcre {
 public:
  explicit Pcre(const std::string& pattern) {
    const std::string whole = "^(?:" + pattern + ")\\z";
    int err = 0;
    PCRE2_SIZE off = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(whole.data()), whole.size(), PCRE2_UTF, &err, &off, nullptr);
    EXPECT_NE(code_, nullptr) << pattern;
    data_ = pcre2_match_data_create_from_pattern(code_, nullptr);
  }
  ~Pcre() {
    pcre2_match_data_free(data_);
    pcre2_code_free(code_);
  }
  bool matches(const std::string& s) const {
    return pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, 0, data_, nullptr) >= 0;
  }

 private:
  pcre2_code* code_ = nullptr;
  pcre2_match_data* data_ = nullptr;
};

// Random valid UTF-8 over the pattern's own characters and a few others.
std::string random_text(const std::string& pattern, std::mt19937_64& rng) {
  std::vector<char32_t> alphabet = {'a', 'Z', '0', '7', ' ', '\n', '-', '.', '_', 0xE9, 0x4E2D, 0x1F600};
  for (size_t i = 0; i < pattern.size();) alphabet.push_back(utf8::next_codepoint(pattern, i));
  std::string s;
  const size_t n = rng() % 12;
  for (size_t k = 0; k < n; ++k) utf8::append_codepoint(alphabet[rng() % alphabet.size()], s);
  return s;
}

const std::vector<std::string> kPatterns = {
    "abc",
    "a|bc|",
    "[a-z]+@[a-z]+\\.(com|org)",
    "\\d{3}-\\d{2,4}",
    "(ab)*c?",
    "[^a-c\\n]{1,3}x",
    ".{2}",
    "\\w+\\s\\W?",
    "(?:x|y){2,}z",
    "[\\-+]?\\d+(\\.\\d+)?",
    "caf\u00e9|\u4e2d+",
    "[\u00e0-\u00ff\u4e00-\u9fff]{2}",
    "a{0}b",
    "(?P<n>a)(?<m>b)?",
    "\\x41\\x{e9}\\x{4e2d}",
    "[]a]",
    "a.*?b",
};

TEST(GrammarRegex, AcceptsExactlyWhatPcre2Matches) {
  const auto vocab = testing::synthetic_vocab();
  std::mt19937_64 rng(20260101);
  for (const std::string& p : kPatterns) {
    const Pcre pcre(p);
    const auto g = compile(regex_grammar(p), vocab);
    int matched = 0;
    for (int i = 0; i < 300; ++i) {
      const std::string s = random_text(p, rng);
      const bool want = pcre.matches(s);
      matched += want;
      ASSERT_EQ(accepts(*g, s), want) << "/" << p << "/ on \"" << s << "\"";
    }
    for (int i = 0; i < 40; ++i) {
      const auto w = testing::random_walk(g, *vocab, rng, 30);
      if (w.ended) {
        ASSERT_TRUE(pcre.matches(w.text)) << "/" << p << "/ walked to \"" << w.text << "\"";
      }
    }
  }
}

TEST(GrammarRegex, DotNeverMatchesBrokenUtf8) {
  const auto g = compile(regex_grammar(".+"), testing::synthetic_vocab());
  EXPECT_TRUE(accepts(*g, "\xC3\xA9"));
  EXPECT_FALSE(accepts(*g, "\xC3"));
  EXPECT_FALSE(accepts(*g, "\xED\xA0\x80"));  // a surrogate
  EXPECT_FALSE(accepts(*g, "\xC0\xAF"));      // overlong
}

TEST(GrammarRegex, RefusesWhatAnAutomatonCannotDoByName) {
  const auto err = [](const char* p) { return dsv4::testing::error_of([&] { regex_grammar(p); }); };
  EXPECT_NE(err("(a)\\1").find("backreference"), std::string::npos);
  EXPECT_NE(err("a(?=b)").find("lookaround"), std::string::npos);
  EXPECT_NE(err("\\bword").find("word boundary"), std::string::npos);
  EXPECT_NE(err("a*+").find("possessive"), std::string::npos);
  EXPECT_NE(err("a^b").find("anchor"), std::string::npos);
  EXPECT_NE(err("(ab").find("unbalanced"), std::string::npos);
  EXPECT_NE(err("\\p{L}").find("Unicode property"), std::string::npos);
}

}  // namespace
}  // namespace dsv4::grammar
