// The automaton and its masks on small grammars: every mask equals the brute-force answer (walk each
// token's bytes), rollback restores masks, recursion nests through the stack and tail calls do not.
#include <gtest/gtest.h>

#include "grammar/choice.h"
#include "grammar/ebnf.h"
#include "grammar/regex.h"
#include "grammar_testing.h"
#include "testing/error_of.h"

namespace dsv4::grammar {
namespace {

using dsv4::testing::error_of;
using testing::accepts;
using testing::bit;
using testing::compile;
using testing::synthetic_vocab;

// Mask bit of each token == whether its bytes (or, for the end token, the end) fit here.
void expect_mask_is_brute_force(const CompiledGrammar& g, const TokenTrie& vocab, int32_t config) {
  std::vector<uint32_t> mask(g.mask_words());
  g.fill_mask(config, mask);
  for (int32_t id = 0; id < vocab.size(); ++id) {
    bool fits = false;
    if (id == vocab.eos()) {
      fits = g.accepting(config);
    } else if (!vocab.bytes(id).empty()) {
      fits = g.walk(config, vocab.bytes(id)) != kDead;
    }
    ASSERT_EQ(bit(mask, id), fits) << "token " << id << " '" << vocab.bytes(id) << "' at config " << config;
  }
  for (int32_t id = vocab.size(); id < static_cast<int32_t>(mask.size() * 32); ++id) ASSERT_FALSE(bit(mask, id));
}

TEST(GrammarAutomaton, MasksEqualBruteForceAlongRandomWalks) {
  const auto vocab = synthetic_vocab();
  const Grammar ebnf = parse_ebnf(R"(
    root ::= "{" ws pair (ws "," ws pair)* ws "}"
    pair ::= "\"" [a-c]+ "\"" ws ":" ws value
    value ::= [0-9]+ | "true" | root | "[" ws (value (ws "," ws value)*)? ws "]"
    ws ::= [ \n]?
  )");
  const auto g = compile(ebnf, vocab);
  std::mt19937_64 rng(11);
  for (int walk = 0; walk < 20; ++walk) {
    Matcher m(g);
    std::vector<uint32_t> mask(g->mask_words());
    for (int step = 0; step < 30; ++step) {
      m.fill_mask(mask);
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < vocab->size(); ++id)
        if (bit(mask, id) && id != vocab->eos()) allowed.push_back(id);
      if (allowed.empty()) break;
      ASSERT_TRUE(m.accept(allowed[rng() % allowed.size()]));
    }
  }
  // Configurations met along the way, each checked once.
  for (int32_t c = 0; c < static_cast<int32_t>(std::min<size_t>(g->configurations(), 60)); ++c)
    expect_mask_is_brute_force(*g, *vocab, c);
}

TEST(GrammarAutomaton, RandomWalksEndInDocuments) {
  const auto vocab = synthetic_vocab();
  const auto g = compile(parse_ebnf(R"(root ::= "[" (item ("," item)*)? "]"
item ::= "a"+ | root)"),
                         vocab);
  std::mt19937_64 rng(5);
  int ended = 0;
  for (int i = 0; i < 100; ++i) {
    const auto w = testing::random_walk(g, *vocab, rng);
    if (!w.ended) continue;
    ++ended;
    EXPECT_TRUE(accepts(*g, w.text)) << w.text;
  }
  EXPECT_GT(ended, 50);
}

TEST(GrammarAutomaton, RollbackRestoresTheMask) {
  const auto vocab = synthetic_vocab();
  const auto g = compile(regex_grammar("(ab|a[0-9]+)c"), vocab);
  Matcher m(g);
  std::vector<uint32_t> before(g->mask_words()), after(g->mask_words());
  m.fill_mask(before);
  ASSERT_TRUE(m.accept('a'));
  ASSERT_TRUE(m.accept('1'));
  EXPECT_FALSE(m.accept('b'));  // refused: no move
  EXPECT_EQ(m.accepted(), 2u);
  m.rollback(2);
  m.fill_mask(after);
  EXPECT_EQ(before, after);
  ASSERT_TRUE(m.accept('a'));
  ASSERT_TRUE(m.accept('b'));
  ASSERT_TRUE(m.accept('c'));
  EXPECT_TRUE(m.accepting());
  ASSERT_TRUE(m.accept(vocab->eos()));
  EXPECT_TRUE(m.ended());
  EXPECT_NE(error_of([&] { m.rollback(5); }).find("rollback"), std::string::npos);
}

TEST(GrammarAutomaton, RecursionNestsAndTailCallsDoNot) {
  const auto vocab = synthetic_vocab();
  const auto nested = compile(parse_ebnf("root ::= \"(\" root \")\" | \"x\""), vocab);
  EXPECT_TRUE(accepts(*nested, "((x))"));
  EXPECT_FALSE(accepts(*nested, "((x)"));
  EXPECT_FALSE(accepts(*nested, std::string(70, '(') + "x" + std::string(70, ')')));  // over 64 frames
  // Right recursion: a tail call, so a long list stays within the depth.
  const auto list = compile(parse_ebnf("root ::= \"a\" root | \"b\""), vocab);
  EXPECT_TRUE(accepts(*list, std::string(500, 'a') + "b"));
  EXPECT_LT(list->configurations(), 10u);
}

TEST(GrammarAutomaton, RefusesLeftRecursionAndUndefinedRules) {
  EXPECT_NE(error_of([] { build_nfa(parse_ebnf("root ::= root \"a\" | \"b\"")); }).find("left-recursive"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_ebnf("root ::= other"); }).find("'other' is used but never defined"),
            std::string::npos);
}

TEST(GrammarAutomaton, EndTokenOnlyWhereTheGrammarMayEnd) {
  const auto vocab = synthetic_vocab();
  const auto g = compile(choice_grammar({"yes", "no", "nope"}), vocab);
  Matcher m(g);
  std::vector<uint32_t> mask(g->mask_words());
  m.fill_mask(mask);
  EXPECT_FALSE(bit(mask, vocab->eos()));
  EXPECT_TRUE(bit(mask, 'y'));
  EXPECT_FALSE(bit(mask, 'x'));
  for (char c : std::string("no")) ASSERT_TRUE(m.accept(static_cast<uint8_t>(c)));
  m.fill_mask(mask);
  EXPECT_TRUE(bit(mask, vocab->eos()));
  EXPECT_TRUE(bit(mask, 'p'));
  EXPECT_FALSE(bit(mask, vocab->size() - 2));  // the special token, never
}

}  // namespace
}  // namespace dsv4::grammar
