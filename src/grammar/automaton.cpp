#include "grammar/automaton.h"

#include <algorithm>

#include "core/error.h"

namespace dsv4::grammar {
namespace {

constexpr int32_t kUnknown = -2;
constexpr uint64_t kAcceptKey = ~uint64_t{0};  // appended to an accepting configuration's key

uint64_t thread(int32_t state, int32_t stack) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(state)) << 32) | static_cast<uint32_t>(stack);
}
int32_t state_of(uint64_t t) { return static_cast<int32_t>(t >> 32); }
int32_t stack_of(uint64_t t) { return static_cast<int32_t>(t & 0xffffffffu); }

}  // namespace

size_t Automaton::KeyHash::operator()(const std::vector<uint64_t>& v) const {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ v.size();
  for (uint64_t x : v) {
    h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdull;
  }
  return static_cast<size_t>(h ^ (h >> 33));
}

Automaton::Automaton(Nfa nfa, int32_t max_depth) : nfa_(std::move(nfa)), max_depth_(max_depth) {
  frames_.push_back({-1, -1, 0});
  std::vector<uint64_t> seeds{thread(nfa_.rule_start[static_cast<size_t>(nfa_.root)], 0)};
  start_ = close(seeds);
  DSV4_CHECK(start_ != kDead, "grammar: matches nothing");
}

int32_t Automaton::push(int32_t ret, int32_t parent) {
  const uint64_t key = thread(ret, parent);
  const auto it = frame_ids_.find(key);
  if (it != frame_ids_.end()) return it->second;
  const int32_t depth = frames_[static_cast<size_t>(parent)].depth + 1;
  if (depth > max_depth_) return kDead;
  frames_.push_back({ret, parent, depth});
  const auto id = static_cast<int32_t>(frames_.size() - 1);
  frame_ids_.emplace(key, id);
  return id;
}

// One thread's moves without reading: empty edges, a call (pushing the return unless it is a tail),
// and at its rule's end a return to the frame on top (or acceptance on the empty stack).
void Automaton::follow(uint64_t t, std::vector<uint64_t>& work, bool& accepting) {
  const int32_t s = state_of(t), stack = stack_of(t);
  const NfaState& st = nfa_.states[static_cast<size_t>(s)];
  if (!st.bytes.empty()) kernel_.push_back(t);
  for (int32_t to : st.empty) work.push_back(thread(to, stack));
  if (st.call >= 0) {
    const int32_t callee = nfa_.rule_start[static_cast<size_t>(st.call)];
    const int32_t frame = nfa_.is_tail[static_cast<size_t>(st.ret)] ? stack : push(st.ret, stack);
    if (frame != kDead) work.push_back(thread(callee, frame));
  }
  if (nfa_.is_final[static_cast<size_t>(s)]) {
    if (stack == 0) {
      accepting = true;  // the root's end, or the end of a rule it tail-called
    } else {
      const Frame& f = frames_[static_cast<size_t>(stack)];
      work.push_back(thread(f.ret, f.parent));
    }
  }
}

int32_t Automaton::close(std::vector<uint64_t>& work) {
  seen_.clear();
  kernel_.clear();
  bool accepting = false;
  while (!work.empty()) {
    const uint64_t t = work.back();
    work.pop_back();
    if (!seen_.insert(t).second) continue;
    follow(t, work, accepting);
  }
  if (kernel_.empty() && !accepting) return kDead;
  std::sort(kernel_.begin(), kernel_.end());
  return intern(kernel_, accepting);
}

int32_t Automaton::intern(std::vector<uint64_t> threads, bool accepting) {
  std::vector<uint64_t> key = threads;
  if (accepting) key.push_back(kAcceptKey);
  const auto it = config_ids_.find(key);
  if (it != config_ids_.end()) return it->second;
  const auto id = static_cast<int32_t>(configs_.size());
  configs_.push_back({std::move(threads), accepting});
  std::array<int32_t, 256> unknown;
  unknown.fill(kUnknown);
  next_.push_back(unknown);
  config_ids_.emplace(std::move(key), id);
  return id;
}

int32_t Automaton::step(int32_t config, uint8_t b) {
  int32_t& cached = next_[static_cast<size_t>(config)][b];
  if (cached != kUnknown) return cached;
  std::vector<uint64_t> seeds;
  for (uint64_t t : configs_[static_cast<size_t>(config)].threads) {
    for (const ByteEdge& e : nfa_.states[static_cast<size_t>(state_of(t))].bytes)
      if (e.lo <= b && b <= e.hi) seeds.push_back(thread(e.to, stack_of(t)));
  }
  const int32_t next = seeds.empty() ? kDead : close(seeds);
  next_[static_cast<size_t>(config)][b] = next;  // `cached` may dangle: close() can grow next_
  return next;
}

int32_t Automaton::walk(int32_t config, std::string_view bytes) {
  for (char c : bytes) {
    if (config == kDead) return kDead;
    config = step(config, static_cast<uint8_t>(c));
  }
  return config;
}

}  // namespace dsv4::grammar
