// The grammar's automaton, made deterministic lazily: a configuration is the set of NFA threads
// (state, call stack) alive after some bytes, closed under empty edges, calls and returns, and
// interned as a small integer; its transition on each byte is computed the first time it is needed and
// cached. Stacks are interned too (a frame is a return state over its parent), so a configuration is a
// sorted list of (state, stack id) pairs and equal configurations get equal ids: the work of walking a
// vocabulary's tokens is mostly table lookups after the first walks.
//
// Tail calls push no frame (nfa.h is_tail), so right recursion (lists, repetition written as recursion)
// runs in constant depth; deeper nesting than max_depth frames is cut off (the grammar cannot go deeper).
// Not thread-safe by itself: hold lock() across calls (one compiled grammar serves many requests).
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "grammar/nfa.h"

namespace dsv4::grammar {

inline constexpr int32_t kDead = -1;

class Automaton {
 public:
  Automaton(Nfa nfa, int32_t max_depth);

  std::unique_lock<std::mutex> lock() const { return std::unique_lock<std::mutex>(mu_); }

  int32_t start() const { return start_; }
  // The configuration after byte b, or kDead.
  int32_t step(int32_t config, uint8_t b);
  // The configuration after the bytes, or kDead.
  int32_t walk(int32_t config, std::string_view bytes);
  // The grammar's root rule may end here.
  bool accepting(int32_t config) const { return configs_[static_cast<size_t>(config)].accepting; }
  // Some byte may follow.
  bool can_continue(int32_t config) const { return !configs_[static_cast<size_t>(config)].threads.empty(); }
  size_t size() const { return configs_.size(); }

 private:
  struct Config {
    std::vector<uint64_t> threads;  // (state << 32 | stack), sorted; only states with byte edges
    bool accepting = false;
  };
  struct KeyHash {
    size_t operator()(const std::vector<uint64_t>& v) const;
  };
  struct Frame {
    int32_t ret, parent, depth;
  };

  int32_t push(int32_t ret, int32_t parent);
  // Closes `seeds` (threads) and interns the result; kDead when nothing is left.
  int32_t close(std::vector<uint64_t>& seeds);
  void follow(uint64_t thread, std::vector<uint64_t>& work, bool& accepting);
  int32_t intern(std::vector<uint64_t> threads, bool accepting);

  Nfa nfa_;
  int32_t max_depth_;
  int32_t start_ = kDead;
  mutable std::mutex mu_;
  std::vector<Frame> frames_;  // frame 0: the empty stack
  std::unordered_map<uint64_t, int32_t> frame_ids_;
  std::vector<Config> configs_;
  std::unordered_map<std::vector<uint64_t>, int32_t, KeyHash> config_ids_;
  std::vector<std::array<int32_t, 256>> next_;  // by config; kUnknown until computed
  // Scratch of close().
  std::unordered_set<uint64_t> seen_;
  std::vector<uint64_t> kernel_;
};

}  // namespace dsv4::grammar
