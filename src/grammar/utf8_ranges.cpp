#include "grammar/utf8_ranges.h"

#include <algorithm>

#include "core/utf8.h"

namespace dsv4::grammar {
namespace {

constexpr char32_t kSurrogateLo = 0xD800, kSurrogateHi = 0xDFFF;

int encoded_length(char32_t c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }
char32_t max_of_length(int n) { return n == 1 ? 0x7F : n == 2 ? 0x7FF : n == 3 ? 0xFFFF : kMaxCodepoint; }

// [lo, hi] of one encoded length, split until every byte position spans a contiguous range: then the
// sequences are exactly the products of the per-position byte ranges.
void split(Grammar& g, char32_t lo, char32_t hi, std::vector<ExprId>& out) {
  const int n = encoded_length(lo);
  for (int i = 1; i < n; ++i) {
    const char32_t m = (char32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) == (hi & ~m)) continue;
    if ((lo & m) != 0) {
      split(g, lo, lo | m, out);
      split(g, (lo | m) + 1, hi, out);
      return;
    }
    if ((hi & m) != m) {
      split(g, lo, (hi & ~m) - 1, out);
      split(g, hi & ~m, hi, out);
      return;
    }
  }
  const std::string a = utf8_encode(lo), b = utf8_encode(hi);
  std::vector<ExprId> seq;
  for (size_t k = 0; k < a.size(); ++k)
    seq.push_back(g.byte_range(static_cast<uint8_t>(a[k]), static_cast<uint8_t>(b[k])));
  out.push_back(g.seq(std::move(seq)));
}

}  // namespace

std::string utf8_encode(char32_t c) {
  std::string s;
  utf8::append_codepoint(c, s);
  return s;
}

CodepointSet CodepointSet::range(char32_t lo, char32_t hi) {
  CodepointSet s;
  s.add(lo, hi);
  return s;
}

void CodepointSet::add(char32_t lo, char32_t hi) {
  if (lo > hi) return;
  hi = std::min(hi, kMaxCodepoint);
  ranges_.emplace_back(lo, hi);
  std::sort(ranges_.begin(), ranges_.end());
  std::vector<std::pair<char32_t, char32_t>> merged;
  for (const auto& r : ranges_) {
    if (!merged.empty() && r.first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, r.second);
    } else {
      merged.push_back(r);
    }
  }
  ranges_ = std::move(merged);
}

void CodepointSet::add(const CodepointSet& other) {
  for (const auto& [lo, hi] : other.ranges_) add(lo, hi);
}

CodepointSet CodepointSet::complement() const {
  CodepointSet c;
  char32_t next = 0;
  for (const auto& [lo, hi] : ranges_) {
    if (lo > next) c.ranges_.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodepoint) c.ranges_.emplace_back(next, kMaxCodepoint);
  return c;
}

CodepointSet CodepointSet::minus(const CodepointSet& other) const {
  CodepointSet keep = other.complement(), out;
  for (const auto& [a, b] : ranges_) {
    for (const auto& [c, d] : keep.ranges_) {
      const char32_t lo = std::max(a, c), hi = std::min(b, d);
      if (lo <= hi) out.ranges_.emplace_back(lo, hi);
    }
  }
  std::sort(out.ranges_.begin(), out.ranges_.end());
  return out;
}

bool CodepointSet::contains(char32_t c) const {
  for (const auto& [lo, hi] : ranges_)
    if (lo <= c && c <= hi) return true;
  return false;
}

ExprId utf8_chars(Grammar& g, const CodepointSet& set) {
  const CodepointSet scalars = set.minus(CodepointSet::range(kSurrogateLo, kSurrogateHi));
  std::vector<ExprId> alts;
  for (auto [lo, hi] : scalars.ranges()) {
    // One piece per encoded length.
    while (lo <= hi) {
      const char32_t top = std::min(hi, max_of_length(encoded_length(lo)));
      split(g, lo, top, alts);
      if (top == kMaxCodepoint) break;
      lo = top + 1;
    }
  }
  return g.alt(std::move(alts));
}

}  // namespace dsv4::grammar
