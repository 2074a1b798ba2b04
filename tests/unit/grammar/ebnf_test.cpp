// guided_grammar's two dialects: GBNF (root ::= ...) and the Lark subset (start: ...).
#include "grammar/ebnf.h"

#include "grammar_testing.h"
#include "testing/error_of.h"

namespace dsv4::grammar {
namespace {

using testing::accepts;
using testing::compile;

TEST(GrammarEbnf, Gbnf) {
  // vLLM's documented example.
  const auto g = compile(parse_ebnf(R"(
root ::= select_statement
select_statement ::= "SELECT " column " from " table " where " condition
column ::= "col_1 " | "col_2 "
table ::= "table_1 " | "table_2 "
condition ::= column "= " number
number ::= "1 " | "2 "
)"),
                         testing::synthetic_vocab());
  EXPECT_TRUE(accepts(*g, "SELECT col_1  from table_2  where col_2 = 1 "));
  EXPECT_FALSE(accepts(*g, "SELECT col_3  from table_2  where col_2 = 1 "));
}

TEST(GrammarEbnf, GbnfOperatorsClassesAndEscapes) {
  const auto g = compile(parse_ebnf(R"(# a comment
root ::= item{2,3} tail?   # trailing comment
item ::= [a-c\-] | "\x41" | "\u00e9"
tail ::= ("!" | [0-9]+)*
)"),
                         testing::synthetic_vocab());
  EXPECT_TRUE(accepts(*g, "a-"));
  EXPECT_TRUE(accepts(*g, "A\u00e9c!12!"));
  EXPECT_FALSE(accepts(*g, "a"));
  EXPECT_FALSE(accepts(*g, "abca"));
}

TEST(GrammarEbnf, Lark) {
  const auto g = compile(parse_ebnf(R"G(
// arithmetic
?start: expr
expr: term (("+" | "-") term)*
term: NUMBER | "(" expr ")" | NAME
NAME: /[a-z_]+/
    | "x".."z" "'"
%import common.NUMBER
)G"),
                         testing::synthetic_vocab());
  EXPECT_TRUE(accepts(*g, "1+(2.5-x')+abc"));
  EXPECT_FALSE(accepts(*g, "1+"));
  EXPECT_FALSE(accepts(*g, "(1"));
}

TEST(GrammarEbnf, RefusesWhatItCannotDo) {
  const auto err = [](const char* t) { return dsv4::testing::error_of([&] { parse_ebnf(t); }); };
  EXPECT_NE(err("start: \"a\"\n%ignore \" \"").find("'%ignore' is not supported"), std::string::npos);
  EXPECT_NE(err("start: \"a\"i").find("case-insensitive"), std::string::npos);
  EXPECT_NE(err("other ::= \"a\"").find("no start rule"), std::string::npos);
  EXPECT_NE(err("root ::= \"a\"\nroot ::= \"b\"").find("defined twice"), std::string::npos);
  EXPECT_NE(err("root ::= \"a").find("line 1"), std::string::npos);
}

}  // namespace
}  // namespace dsv4::grammar
