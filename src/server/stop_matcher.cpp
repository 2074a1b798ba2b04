#include "server/stop_matcher.h"

#include <algorithm>

namespace dsv4::server {

StopMatcher::StopMatcher(std::vector<std::string> stops, bool include_stop)
    : stops_(std::move(stops)), include_stop_(include_stop) {
  for (const std::string& s : stops_) max_len_ = std::max(max_len_, s.size());
}

// The length of the longest tail of `text` that is a proper prefix of a stop string.
size_t StopMatcher::holdback(std::string_view text) const {
  const size_t longest = std::min(text.size(), max_len_ > 0 ? max_len_ - 1 : 0);
  for (size_t n = longest; n > 0; --n) {
    const std::string_view tail = text.substr(text.size() - n);
    for (const std::string& s : stops_) {
      if (s.size() > n && std::string_view(s).substr(0, n) == tail) return n;
    }
  }
  return 0;
}

std::string StopMatcher::push(std::string_view delta) {
  if (matched_) return {};
  if (stops_.empty()) return std::string(delta);
  held_.append(delta);
  size_t best = std::string::npos;
  const std::string* which = nullptr;
  for (const std::string& s : stops_) {
    const size_t at = held_.find(s);
    if (at == std::string::npos) continue;
    if (at < best || (at == best && s.size() > which->size())) best = at, which = &s;
  }
  if (which != nullptr) {
    matched_ = *which;
    std::string out = held_.substr(0, best + (include_stop_ ? which->size() : 0));
    held_.clear();
    return out;
  }
  const size_t keep = holdback(held_);
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::flush() {
  std::string out;
  out.swap(held_);
  return out;
}

}  // namespace dsv4::server
