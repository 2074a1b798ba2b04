#include "grammar/choice.h"

#include "core/error.h"
#include "core/utf8.h"

namespace dsv4::grammar {

Grammar choice_grammar(const std::vector<std::string>& choices) {
  DSV4_CHECK(!choices.empty(), "guided_choice: the list is empty");
  Grammar g;
  std::vector<ExprId> alts;
  for (const std::string& c : choices) {
    DSV4_CHECK(utf8::is_valid(c), "guided_choice: a choice is not valid UTF-8");
    alts.push_back(g.literal(c));
  }
  g.set_root(g.rule("root", g.alt(std::move(alts))));
  return g;
}

}  // namespace dsv4::grammar
