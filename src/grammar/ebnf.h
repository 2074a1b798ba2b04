// vLLM's guided_grammar: the EBNF of llama.cpp / xgrammar (GBNF: `root ::= ...`) and the Lark subset
// llguidance reads (`start: ...`), as a grammar over the text's bytes.
//   rules          name ::= expr   |  name: expr   (?name / !name: the same; alternatives may continue
//                  on lines starting with '|'); the start rule is `root` (GBNF) or `start` (Lark)
//   terminals      "text" 'text' (escapes \n \r \t \\ \" \' \xHH \uHHHH \UHHHHHHHH), [class] as in
//                  regexes, /regex/ (regex.h), "a".."z" (a range of single characters), . (any char)
//   operators      sequence, |, ( ), * + ?, {n} {n,} {n,m}, [ ... ] in Lark (optional)
//   comments       # ... (GBNF), // ... (Lark)
//   %import common.NAME for Lark's common terminals (NUMBER, INT, SIGNED_NUMBER, WS, WS_INLINE, NEWLINE,
//   ESCAPED_STRING, CNAME, WORD, LETTER, DIGIT, HEXDIGIT, LCASE_LETTER, UCASE_LETTER).
// Refused with an error naming the construct: %ignore (implicit whitespace between every lexeme),
// %declare and other directives, case-insensitive literals ("..."i), left recursion.
#pragma once

#include <string_view>

#include "grammar/grammar.h"

namespace dsv4::grammar {

// Throws dsv4::Error ("grammar: ...", with a line number where it helps).
Grammar parse_ebnf(std::string_view text);

}  // namespace dsv4::grammar
