#include "grammar/nfa.h"

#include "core/error.h"

namespace dsv4::grammar {
namespace {

class Builder {
 public:
  explicit Builder(const Grammar& g) : g_(g) {}

  Nfa run() {
    g_.check_defined();
    const size_t n = g_.rules().size();
    nfa_.rule_start.resize(n);
    nfa_.rule_final.resize(n);
    for (size_t r = 0; r < n; ++r) {
      nfa_.rule_start[r] = fresh();
      nfa_.rule_final[r] = build(g_.rules()[r].body, nfa_.rule_start[r]);
    }
    nfa_.root = g_.root();
    nfa_.is_final.assign(nfa_.states.size(), 0);
    for (int32_t f : nfa_.rule_final) nfa_.is_final[static_cast<size_t>(f)] = 1;
    mark_tails();
    return std::move(nfa_);
  }

 private:
  int32_t fresh() {
    DSV4_CHECK(nfa_.states.size() < kMaxNfaStates, "grammar: too large (over {} automaton states)", kMaxNfaStates);
    nfa_.states.emplace_back();
    return static_cast<int32_t>(nfa_.states.size() - 1);
  }
  NfaState& at(int32_t s) { return nfa_.states[static_cast<size_t>(s)]; }
  void link(int32_t from, int32_t to) { at(from).empty.push_back(to); }

  // Appends the states of `e` after `from`; returns the state where a match of `e` ends.
  int32_t build(ExprId id, int32_t from) {
    const Expr& e = g_.expr(id);
    switch (e.kind) {
      case Expr::Kind::kEmpty:
        return from;
      case Expr::Kind::kBytes:
        return bytes(e.bytes, from);
      case Expr::Kind::kSeq: {
        int32_t cur = from;
        for (ExprId item : e.items) cur = build(item, cur);
        return cur;
      }
      case Expr::Kind::kAlt: {
        const int32_t end = fresh();
        for (ExprId item : e.items) {
          const int32_t start = fresh();
          link(from, start);
          link(build(item, start), end);
        }
        return end;
      }
      case Expr::Kind::kRepeat:
        return repeat(e, from);
      case Expr::Kind::kRule: {
        const int32_t call = fresh(), ret = fresh();
        link(from, call);
        at(call).call = e.rule;
        at(call).ret = ret;
        return ret;
      }
    }
    return from;
  }

  int32_t bytes(const ByteSet& set, int32_t from) {
    const int32_t to = fresh();
    for (int b = 0; b < 256;) {
      if (!set.test(static_cast<size_t>(b))) {
        ++b;
        continue;
      }
      int hi = b;
      while (hi + 1 < 256 && set.test(static_cast<size_t>(hi + 1))) ++hi;
      at(from).bytes.push_back({static_cast<uint8_t>(b), static_cast<uint8_t>(hi), to});
      b = hi + 1;
    }
    return to;
  }

  // min copies, then either a loop (unbounded) or max - min optional copies, each able to stop.
  int32_t repeat(const Expr& e, int32_t from) {
    int32_t cur = from;
    for (int32_t i = 0; i < e.min; ++i) cur = build(e.items[0], cur);
    if (e.max == kUnbounded) {
      const int32_t loop = fresh();
      link(cur, loop);
      link(build(e.items[0], loop), loop);
      return loop;
    }
    const int32_t end = fresh();
    for (int32_t i = e.min; i < e.max; ++i) {
      link(cur, end);
      cur = build(e.items[0], cur);
    }
    link(cur, end);
    return end;
  }

  // A return state is a tail when its empty closure reaches its rule's final state and no byte or call.
  void mark_tails() {
    nfa_.is_tail.assign(nfa_.states.size(), 0);
    std::vector<int32_t> stack;
    std::vector<uint8_t> seen(nfa_.states.size(), 0);
    for (const NfaState& s : nfa_.states) {
      if (s.ret < 0) continue;
      bool final = false, other = false;
      std::vector<int32_t> visited;
      stack.assign(1, s.ret);
      while (!stack.empty() && !other) {
        const int32_t x = stack.back();
        stack.pop_back();
        if (seen[static_cast<size_t>(x)]) continue;
        seen[static_cast<size_t>(x)] = 1;
        visited.push_back(x);
        const NfaState& st = at(x);
        final = final || nfa_.is_final[static_cast<size_t>(x)];
        other = !st.bytes.empty() || st.call >= 0;
        for (int32_t t : st.empty) stack.push_back(t);
      }
      for (int32_t v : visited) seen[static_cast<size_t>(v)] = 0;
      nfa_.is_tail[static_cast<size_t>(s.ret)] = final && !other;
    }
  }

  const Grammar& g_;
  Nfa nfa_;
};

// The rules each rule may call before reading a byte (through empty edges and nullable callees).
std::vector<std::vector<RuleId>> calls_at_start(const Nfa& nfa, const std::vector<uint8_t>& nullable) {
  std::vector<std::vector<RuleId>> out(nfa.rule_start.size());
  std::vector<uint8_t> seen(nfa.states.size(), 0);
  for (size_t r = 0; r < out.size(); ++r) {
    std::vector<int32_t> stack{nfa.rule_start[r]}, visited;
    while (!stack.empty()) {
      const int32_t x = stack.back();
      stack.pop_back();
      if (seen[static_cast<size_t>(x)]) continue;
      seen[static_cast<size_t>(x)] = 1;
      visited.push_back(x);
      const NfaState& s = nfa.states[static_cast<size_t>(x)];
      for (int32_t t : s.empty) stack.push_back(t);
      if (s.call >= 0) {
        out[r].push_back(s.call);
        if (nullable[static_cast<size_t>(s.call)]) stack.push_back(s.ret);
      }
    }
    for (int32_t v : visited) seen[static_cast<size_t>(v)] = 0;
  }
  return out;
}

// Rules that can match the empty string (a fixpoint: a call is empty when its callee can be).
std::vector<uint8_t> nullable_rules(const Nfa& nfa) {
  std::vector<uint8_t> nullable(nfa.rule_start.size(), 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < nullable.size(); ++r) {
      if (nullable[r]) continue;
      std::vector<int32_t> stack{nfa.rule_start[r]};
      std::vector<uint8_t> seen(nfa.states.size(), 0);
      while (!stack.empty() && !nullable[r]) {
        const int32_t x = stack.back();
        stack.pop_back();
        if (seen[static_cast<size_t>(x)]) continue;
        seen[static_cast<size_t>(x)] = 1;
        if (x == nfa.rule_final[r]) nullable[r] = 1;
        const NfaState& s = nfa.states[static_cast<size_t>(x)];
        for (int32_t t : s.empty) stack.push_back(t);
        if (s.call >= 0 && nullable[static_cast<size_t>(s.call)]) stack.push_back(s.ret);
      }
      changed = changed || nullable[r];
    }
  }
  return nullable;
}

void refuse_left_recursion(const Grammar& g, const Nfa& nfa) {
  const auto calls = calls_at_start(nfa, nullable_rules(nfa));
  // Depth-first search for a cycle; 1 = on the path, 2 = done.
  std::vector<uint8_t> mark(calls.size(), 0);
  const auto visit = [&](auto&& self, RuleId r) -> void {
    mark[static_cast<size_t>(r)] = 1;
    for (RuleId c : calls[static_cast<size_t>(r)]) {
      if (mark[static_cast<size_t>(c)] == 1)
        fail("grammar: rule '{}' is left-recursive (it can call itself before reading a byte)",
             g.rules()[static_cast<size_t>(c)].name);
      if (mark[static_cast<size_t>(c)] == 0) self(self, c);
    }
    mark[static_cast<size_t>(r)] = 2;
  };
  for (size_t r = 0; r < calls.size(); ++r)
    if (mark[r] == 0) visit(visit, static_cast<RuleId>(r));
}

}  // namespace

Nfa build_nfa(const Grammar& g) {
  Nfa nfa = Builder(g).run();
  refuse_left_recursion(g, nfa);
  return nfa;
}

}  // namespace dsv4::grammar
