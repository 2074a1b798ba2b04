// A grammar as one nondeterministic automaton per rule (Thompson's construction): states joined by
// byte-range edges, empty edges and calls (enter a rule, come back to a return state when it ends).
// Left recursion is refused: the automaton could otherwise call a rule forever without reading a byte.
#pragma once

#include <cstdint>
#include <vector>

#include "grammar/grammar.h"

namespace dsv4::grammar {

struct ByteEdge {
  uint8_t lo = 0, hi = 0;
  int32_t to = 0;
};

struct NfaState {
  std::vector<ByteEdge> bytes;
  std::vector<int32_t> empty;
  RuleId call = -1;  // a call edge: enter `call`, continue at `ret` when it ends
  int32_t ret = -1;
};

struct Nfa {
  std::vector<NfaState> states;
  std::vector<int32_t> rule_start, rule_final;  // by rule
  std::vector<uint8_t> is_final;                // by state: the final state of its rule
  // By state: a return state from which nothing but the rule's end is reachable (no byte, no call),
  // so a call returning there is a tail call and needs no stack frame.
  std::vector<uint8_t> is_tail;
  RuleId root = -1;
};

inline constexpr size_t kMaxNfaStates = size_t{1} << 21;

// Throws dsv4::Error for an undefined rule, left recursion (naming the rule) or a grammar over
// kMaxNfaStates states.
Nfa build_nfa(const Grammar& g);

}  // namespace dsv4::grammar
