// JSON's lexical pieces as grammar expressions, shared by the JSON-schema and regex front ends:
// bounded whitespace, string characters (with their escapes), numbers, and any JSON value.
//
// Whitespace between JSON tokens is at most kMaxJsonWhitespace bytes of space, tab, CR or LF, so a
// model that likes whitespace cannot loop on it (xgrammar allows any amount by default).
// Characters JSON must escape are written with the canonical escape (\" \\ \b \f \n \r \t, else
// \u00XX); every other character as itself in UTF-8. Free-form strings without length bounds also
// take any escape JSON has (\/, \uXXXX); bounded ones only the canonical escapes, so that each
// character the grammar counts is one character of the decoded string.
#pragma once

#include "grammar/grammar.h"
#include "grammar/utf8_ranges.h"

namespace dsv4::grammar {

inline constexpr int32_t kMaxJsonWhitespace = 8;
// Digits of a number's integer part and of its fraction, at most: more than a double holds, and a
// model that likes digits cannot loop on them (JSON itself has no bound).
inline constexpr int32_t kMaxJsonDigits = 20;

ExprId json_ws(Grammar& g);
// One character of `set` inside a JSON string, as JSON writes it.
ExprId json_string_char(Grammar& g, const CodepointSet& set);
// A whole JSON string ("...") of any content with min..max characters (max may be kUnbounded).
ExprId json_string(Grammar& g, int32_t min_chars = 0, int32_t max_chars = kUnbounded);
// -?(0|[1-9][0-9]{0,19})(\.[0-9]{1,20})?([eE][+-]?[0-9]{1,2})?; integers: without fraction and exponent.
ExprId json_number(Grammar& g, bool integer);
// The rule "any JSON value" (object, array, string, number, true, false, null), declared once per
// grammar under the name "json_value" (recursive, through calls).
RuleId json_value_rule(Grammar& g);
// A JSON object of any members.
ExprId json_any_object(Grammar& g);

}  // namespace dsv4::grammar
