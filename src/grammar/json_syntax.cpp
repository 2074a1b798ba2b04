#include "grammar/json_syntax.h"

#include <fmt/format.h>

namespace dsv4::grammar {
namespace {

// The canonical escape of a character JSON cannot write raw.
std::string escape_of(char32_t c) {
  switch (c) {
    case '"':
      return "\\\"";
    case '\\':
      return "\\\\";
    case '\b':
      return "\\b";
    case '\f':
      return "\\f";
    case '\n':
      return "\\n";
    case '\r':
      return "\\r";
    case '\t':
      return "\\t";
    default:
      return fmt::format("\\u{:04x}", static_cast<uint32_t>(c));
  }
}

CodepointSet must_escape() {
  CodepointSet s = CodepointSet::range(0, 0x1F);
  s.add('"', '"');
  s.add('\\', '\\');
  return s;
}

ExprId hex_digit(Grammar& g) {
  ByteSet s;
  for (char c : std::string_view("0123456789abcdefABCDEF")) s.set(static_cast<uint8_t>(c));
  return g.bytes(s);
}

}  // namespace

ExprId json_ws(Grammar& g) {
  ByteSet s;
  for (char c : std::string_view(" \t\r\n")) s.set(static_cast<uint8_t>(c));
  return g.repeat(g.bytes(s), 0, kMaxJsonWhitespace);
}

ExprId json_string_char(Grammar& g, const CodepointSet& set) {
  const CodepointSet escaped = must_escape();
  std::vector<ExprId> alts;
  const CodepointSet raw = set.minus(escaped);
  if (!raw.empty()) alts.push_back(utf8_chars(g, raw));
  for (const auto& [lo, hi] : escaped.ranges()) {
    for (char32_t c = lo; c <= hi; ++c)
      if (set.contains(c)) alts.push_back(g.literal(escape_of(c)));
  }
  return g.alt(std::move(alts));
}

ExprId json_string(Grammar& g, int32_t min_chars, int32_t max_chars) {
  std::vector<ExprId> chars{json_string_char(g, CodepointSet::all())};
  if (min_chars == 0 && max_chars == kUnbounded) {
    ByteSet simple;
    for (char c : std::string_view("\"\\/bfnrt")) simple.set(static_cast<uint8_t>(c));
    chars.push_back(g.seq({g.literal("\\"), g.bytes(simple)}));
    chars.push_back(g.seq({g.literal("\\u"), g.repeat(hex_digit(g), 4, 4)}));
  }
  const ExprId c = g.alt(std::move(chars));
  return g.seq({g.literal("\""), g.repeat(c, min_chars, max_chars), g.literal("\"")});
}

ExprId json_number(Grammar& g, bool integer) {
  const ExprId digit = g.byte_range('0', '9');
  const ExprId int_part =
      g.alt({g.literal("0"), g.seq({g.byte_range('1', '9'), g.repeat(digit, 0, kMaxJsonDigits - 1)})});
  std::vector<ExprId> parts{g.optional(g.literal("-")), int_part};
  if (!integer) {
    const ExprId plus_digits = g.repeat(digit, 1, kMaxJsonDigits);
    parts.push_back(g.optional(g.seq({g.literal("."), plus_digits})));
    ByteSet e, sign;
    e.set('e');
    e.set('E');
    sign.set('+');
    sign.set('-');
    // At most two exponent digits: every such number is a finite double (1e999 is valid JSON, but
    // parsers turn it into infinity or refuse it).
    parts.push_back(g.optional(g.seq({g.bytes(e), g.optional(g.bytes(sign)), g.repeat(digit, 1, 2)})));
  }
  return g.seq(std::move(parts));
}

RuleId json_value_rule(Grammar& g) {
  if (const RuleId r = g.find("json_value"); r >= 0) return r;
  const RuleId value = g.declare("json_value");
  const ExprId ws = json_ws(g);
  const ExprId member = g.seq({json_string(g), ws, g.literal(":"), ws, g.ref(value)});
  const ExprId members = g.seq({member, g.star(g.seq({ws, g.literal(","), ws, member}))});
  const ExprId object = g.seq({g.literal("{"), ws, g.optional(g.seq({members, ws})), g.literal("}")});
  const ExprId items = g.seq({g.ref(value), g.star(g.seq({ws, g.literal(","), ws, g.ref(value)}))});
  const ExprId array = g.seq({g.literal("["), ws, g.optional(g.seq({items, ws})), g.literal("]")});
  g.define(value, g.alt({object, array, json_string(g), json_number(g, false), g.literal("true"), g.literal("false"),
                         g.literal("null")}));
  return value;
}

ExprId json_any_object(Grammar& g) {
  const RuleId value = json_value_rule(g);
  const ExprId ws = json_ws(g);
  const ExprId member = g.seq({json_string(g), ws, g.literal(":"), ws, g.ref(value)});
  const ExprId members = g.seq({member, g.star(g.seq({ws, g.literal(","), ws, member}))});
  return g.seq({g.literal("{"), ws, g.optional(g.seq({members, ws})), g.literal("}")});
}

}  // namespace dsv4::grammar
