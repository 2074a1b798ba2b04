// The grammar every front end (JSON schema, regex, choice list, EBNF) compiles to: named rules whose
// bodies are expressions over bytes. An expression matches byte strings (never code points: UTF-8 is
// spelled out as byte sequences, see utf8_ranges.h), so the automaton built from it can walk token
// bytes directly. Rules may refer to each other, recursively too (the automaton keeps a stack).
#pragma once

#include <bitset>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dsv4::grammar {

using ByteSet = std::bitset<256>;
using ExprId = int32_t;
using RuleId = int32_t;

inline constexpr int32_t kUnbounded = -1;

struct Expr {
  enum class Kind : uint8_t { kEmpty, kBytes, kSeq, kAlt, kRepeat, kRule };
  Kind kind = Kind::kEmpty;
  ByteSet bytes;              // kBytes: one byte of the set
  std::vector<ExprId> items;  // kSeq and kAlt: the parts; kRepeat: the one repeated
  int32_t min = 0, max = 0;   // kRepeat; max may be kUnbounded
  RuleId rule = -1;           // kRule
};

struct Rule {
  std::string name;
  ExprId body = -1;  // -1 until defined
};

class Grammar {
 public:
  ExprId empty();
  ExprId bytes(const ByteSet& set);
  ExprId byte_range(uint8_t lo, uint8_t hi);
  ExprId literal(std::string_view text);
  ExprId seq(std::vector<ExprId> items);
  // No alternatives: matches nothing.
  ExprId alt(std::vector<ExprId> items);
  ExprId optional(ExprId e) { return repeat(e, 0, 1); }
  ExprId star(ExprId e) { return repeat(e, 0, kUnbounded); }
  ExprId repeat(ExprId e, int32_t min, int32_t max);
  ExprId nothing() { return alt({}); }

  // Rules: declared first (so bodies can refer to rules defined later), then defined once.
  RuleId declare(std::string name);
  void define(RuleId rule, ExprId body);
  RuleId rule(std::string name, ExprId body);  // declare + define
  ExprId ref(RuleId rule);
  // The rule of that name, or -1.
  RuleId find(std::string_view name) const;
  // Copies another grammar's rules in (their names prefixed with `prefix`); returns its root here.
  RuleId import(const Grammar& other, std::string_view prefix);

  void set_root(RuleId r) { root_ = r; }
  RuleId root() const { return root_; }
  const Expr& expr(ExprId e) const { return exprs_[static_cast<size_t>(e)]; }
  const std::vector<Rule>& rules() const { return rules_; }
  // Throws dsv4::Error naming a rule that was referred to but never defined.
  void check_defined() const;

 private:
  ExprId add(Expr e);

  std::vector<Expr> exprs_;
  std::vector<Rule> rules_;
  RuleId root_ = -1;
};

// sequence(), then another after each '|' of `text` at `at` (moved past it), as alternatives: the
// alternation of the text front ends (regex, EBNF).
template <class Sequence>
ExprId alternatives(Grammar& g, std::string_view text, size_t& at, Sequence&& sequence) {
  std::vector<ExprId> alts{sequence()};
  while (at < text.size() && text[at] == '|') {
    ++at;
    alts.push_back(sequence());
  }
  return g.alt(std::move(alts));
}

}  // namespace dsv4::grammar
