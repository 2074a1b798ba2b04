#include "grammar/token_trie.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace dsv4::grammar {

TokenTrie::TokenTrie(Vocabulary vocab) : vocab_(std::move(vocab)) {
  std::vector<int32_t> order;
  for (size_t id = 0; id < vocab_.bytes.size(); ++id) {
    const std::string& b = vocab_.bytes[id];
    DSV4_CHECK(b.size() < 0xffff, "grammar: token {} has {} bytes", id, b.size());
    if (!b.empty() && static_cast<int32_t>(id) != vocab_.eos) order.push_back(static_cast<int32_t>(id));
  }
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return bytes(a) < bytes(b); });
  std::vector<uint32_t> path;  // open nodes, by depth - 1
  const auto close_to = [&](size_t depth) {
    while (path.size() > depth) {
      nodes_[path.back()].skip = static_cast<uint32_t>(nodes_.size());
      path.pop_back();
    }
  };
  const std::string* prev = nullptr;
  for (int32_t id : order) {
    const std::string& b = bytes(id);
    size_t common = 0;
    if (prev != nullptr) {
      while (common < b.size() && common < prev->size() && (*prev)[common] == b[common]) ++common;
    }
    close_to(common);
    for (size_t d = path.size(); d < b.size(); ++d) {
      Node n;
      n.byte = static_cast<uint8_t>(b[d]);
      n.depth = static_cast<uint16_t>(d + 1);
      n.ids_begin = n.ids_end = static_cast<uint32_t>(ids_.size());
      path.push_back(static_cast<uint32_t>(nodes_.size()));
      nodes_.push_back(n);
    }
    ids_.push_back(id);
    nodes_[path.back()].ids_end = static_cast<uint32_t>(ids_.size());
    max_depth_ = std::max(max_depth_, b.size());
    prev = &b;
  }
  close_to(0);
}

}  // namespace dsv4::grammar
