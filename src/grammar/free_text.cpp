#include "grammar/free_text.h"

#include <map>

#include "core/error.h"
#include "core/utf8.h"
#include "grammar/utf8_ranges.h"

namespace dsv4::grammar {

ExprId text_until(Grammar& g, std::string_view marker, std::string_view name) {
  std::vector<char32_t> m;
  for (size_t i = 0; i < marker.size();) m.push_back(utf8::next_codepoint(marker, i));
  DSV4_CHECK(!m.empty(), "grammar: an empty marker");
  const size_t n = m.size();
  // next(j, c): the marker prefix matched after reading c with j matched (the marker has no border, so
  // a mismatch restarts at 1 when c is its first character, else 0).
  const auto next = [&](size_t j, char32_t c) -> size_t { return c == m[j] ? j + 1 : (c == m[0] ? 1 : 0); };
  std::vector<RuleId> state(n);
  for (size_t j = 0; j < n; ++j) state[j] = g.declare(fmt::format("{} {}", name, j));
  for (size_t j = 0; j < n; ++j) {
    // Characters grouped by the state they lead to; the one completing the marker ends the text.
    std::map<size_t, CodepointSet> by_target;
    CodepointSet special;
    special.add(m[j], m[j]);
    special.add(m[0], m[0]);
    by_target[0] = CodepointSet::all().minus(special);
    for (char32_t c : {m[j], m[0]}) by_target[next(j, c)].add(c, c);
    std::vector<ExprId> alts;
    for (const auto& [k, set] : by_target) {
      if (set.empty()) continue;
      if (k == n) {
        alts.push_back(utf8_chars(g, set));  // the marker's last character: done
      } else {
        alts.push_back(g.seq({utf8_chars(g, set), g.ref(state[k])}));
      }
    }
    g.define(state[j], g.alt(std::move(alts)));
  }
  return g.ref(state[0]);
}

}  // namespace dsv4::grammar
