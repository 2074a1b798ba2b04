#include "grammar/grammar.h"

#include "core/error.h"

namespace dsv4::grammar {

ExprId Grammar::add(Expr e) {
  exprs_.push_back(std::move(e));
  return static_cast<ExprId>(exprs_.size() - 1);
}

ExprId Grammar::empty() { return add(Expr{}); }

ExprId Grammar::bytes(const ByteSet& set) {
  Expr e;
  e.kind = Expr::Kind::kBytes;
  e.bytes = set;
  return add(std::move(e));
}

ExprId Grammar::byte_range(uint8_t lo, uint8_t hi) {
  ByteSet s;
  for (int b = lo; b <= hi; ++b) s.set(static_cast<size_t>(b));
  return bytes(s);
}

ExprId Grammar::literal(std::string_view text) {
  std::vector<ExprId> parts;
  for (char c : text) {
    const auto b = static_cast<uint8_t>(c);
    parts.push_back(byte_range(b, b));
  }
  return seq(std::move(parts));
}

ExprId Grammar::seq(std::vector<ExprId> items) {
  if (items.empty()) return empty();
  if (items.size() == 1) return items[0];
  Expr e;
  e.kind = Expr::Kind::kSeq;
  e.items = std::move(items);
  return add(std::move(e));
}

ExprId Grammar::alt(std::vector<ExprId> items) {
  if (items.size() == 1) return items[0];
  Expr e;
  e.kind = Expr::Kind::kAlt;
  e.items = std::move(items);
  return add(std::move(e));
}

ExprId Grammar::repeat(ExprId item, int32_t min, int32_t max) {
  DSV4_CHECK(min >= 0 && (max == kUnbounded || max >= min), "grammar: bad repetition {{{},{}}}", min, max);
  if (min == 1 && max == 1) return item;
  Expr e;
  e.kind = Expr::Kind::kRepeat;
  e.items = {item};
  e.min = min;
  e.max = max;
  return add(std::move(e));
}

RuleId Grammar::declare(std::string name) {
  rules_.push_back({std::move(name), -1});
  return static_cast<RuleId>(rules_.size() - 1);
}

void Grammar::define(RuleId rule, ExprId body) {
  Rule& r = rules_.at(static_cast<size_t>(rule));
  DSV4_CHECK(r.body < 0, "grammar: rule '{}' is defined twice", r.name);
  r.body = body;
}

RuleId Grammar::rule(std::string name, ExprId body) {
  const RuleId r = declare(std::move(name));
  define(r, body);
  return r;
}

ExprId Grammar::ref(RuleId rule) {
  Expr e;
  e.kind = Expr::Kind::kRule;
  e.rule = rule;
  return add(std::move(e));
}

RuleId Grammar::find(std::string_view name) const {
  for (size_t i = 0; i < rules_.size(); ++i)
    if (rules_[i].name == name) return static_cast<RuleId>(i);
  return -1;
}

RuleId Grammar::import(const Grammar& other, std::string_view prefix) {
  const auto expr_base = static_cast<ExprId>(exprs_.size());
  const auto rule_base = static_cast<RuleId>(rules_.size());
  for (Expr e : other.exprs_) {
    for (ExprId& item : e.items) item += expr_base;
    if (e.kind == Expr::Kind::kRule) e.rule += rule_base;
    exprs_.push_back(std::move(e));
  }
  for (const Rule& r : other.rules_)
    rules_.push_back({std::string(prefix) + r.name, r.body < 0 ? -1 : r.body + expr_base});
  DSV4_CHECK(other.root_ >= 0, "grammar: importing a grammar without a root");
  return other.root_ + rule_base;
}

void Grammar::check_defined() const {
  DSV4_CHECK(root_ >= 0, "grammar: no root rule");
  for (const Rule& r : rules_) DSV4_CHECK(r.body >= 0, "grammar: rule '{}' is used but never defined", r.name);
}

}  // namespace dsv4::grammar
