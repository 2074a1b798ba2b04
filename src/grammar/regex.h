// Regular expressions (the PCRE / Python subset that JSON-schema patterns and vLLM's guided_regex use)
// as grammar expressions matching the whole text: alternation, groups ((...), (?:...), named), classes
// with ranges and negation, ., the escapes \d \w \s (ASCII, as PCRE without UCP) and their negations,
// \n \r \t \f \v \0 \xHH \x{H..} \uHHHH, quantifiers * + ? {n} {n,} {n,m} (lazy forms match the same
// texts). ^ at the start and $ at the end are accepted and change nothing; anything a finite automaton
// cannot do (backreferences, lookaround, \b, possessive quantifiers, anchors inside) is refused with an
// error naming it.
#pragma once

#include <string_view>

#include "grammar/grammar.h"

namespace dsv4::grammar {

enum class RegexTarget {
  kRaw,         // the text itself
  kJsonString,  // the content of a JSON string: characters JSON escapes are matched as their escapes
};

// Throws dsv4::Error ("regex: ...") for what it cannot compile.
ExprId parse_regex(Grammar& g, std::string_view pattern, RegexTarget target = RegexTarget::kRaw);

}  // namespace dsv4::grammar

namespace dsv4::grammar {

// The grammar of texts that match the whole pattern (guided_regex).
Grammar regex_grammar(std::string_view pattern);

}  // namespace dsv4::grammar
