#include "grammar/ebnf.h"

#include <algorithm>
#include <cctype>
#include <map>

#include "core/error.h"
#include "core/utf8.h"
#include "grammar/regex.h"
#include "grammar/utf8_ranges.h"

namespace dsv4::grammar {
namespace {

// Lark's common.lark terminals, as regexes.
const std::map<std::string, std::string, std::less<>> kCommon = {
    {"DIGIT", "[0-9]"},
    {"HEXDIGIT", "[a-fA-F0-9]"},
    {"INT", "[0-9]+"},
    {"SIGNED_INT", "[+-]?[0-9]+"},
    {"DECIMAL", R"([0-9]+\.[0-9]*|\.[0-9]+)"},
    {"NUMBER", R"(([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?)"},
    {"FLOAT", R"(([0-9]+\.[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+)"},
    {"SIGNED_NUMBER", R"([+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?)"},
    {"LCASE_LETTER", "[a-z]"},
    {"UCASE_LETTER", "[A-Z]"},
    {"LETTER", "[a-zA-Z]"},
    {"WORD", "[a-zA-Z]+"},
    {"CNAME", "[a-zA-Z_][a-zA-Z0-9_]*"},
    {"WS_INLINE", "[ \\t]+"},
    {"WS", "[ \\t\\f\\r\\n]+"},
    {"CR", "\\r"},
    {"LF", "\\n"},
    {"NEWLINE", "(\\r?\\n)+"},
    {"ESCAPED_STRING", R"("([^"\\]|\\.)*")"},
};

class EbnfParser {
 public:
  explicit EbnfParser(std::string_view text) : t_(text) {
    DSV4_CHECK(utf8::is_valid(text), "grammar: the text is not valid UTF-8");
  }

  Grammar parse() {
    skip_space();
    while (!done()) {
      if (at('%')) {
        directive();
      } else {
        definition();
      }
      skip_space();
    }
    RuleId root = g_.find("root");
    if (root < 0) root = g_.find("start");
    DSV4_CHECK(root >= 0, "grammar: no start rule (name one 'root' or 'start')");
    for (const Rule& r : g_.rules()) DSV4_CHECK(r.body >= 0, "grammar: rule '{}' is used but never defined", r.name);
    g_.set_root(root);
    return std::move(g_);
  }

 private:
  bool done() const { return i_ >= t_.size(); }
  bool at(char c) const { return i_ < t_.size() && t_[i_] == c; }
  bool at(std::string_view s) const { return t_.substr(i_, s.size()) == s; }
  size_t line() const {
    return static_cast<size_t>(std::count(t_.begin(), t_.begin() + static_cast<long>(i_), '\n')) + 1;
  }
  [[noreturn]] void error(std::string_view what) const { fail("grammar: line {}: {}", line(), what); }
  static bool name_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  }

  // Spaces and comments; `newlines` false stops at a newline (the end of a rule, unless the next line
  // continues it).
  void skip_space(bool newlines = true) {
    while (!done()) {
      if (at('#') || at("//")) {
        while (!done() && !at('\n')) ++i_;
      } else if (at('\n') && !newlines) {
        return;
      } else if (std::isspace(static_cast<unsigned char>(t_[i_]))) {
        ++i_;
      } else {
        return;
      }
    }
  }

  std::string name() {
    const size_t from = i_;
    while (!done() && name_char(t_[i_])) ++i_;
    if (i_ == from) error(fmt::format("expected a rule name, found '{}'", t_.substr(i_, 12)));
    return std::string(t_.substr(from, i_ - from));
  }

  RuleId rule_named(const std::string& n) {
    const RuleId r = g_.find(n);
    return r >= 0 ? r : g_.declare(n);
  }

  // Whether a definition starts here: [?!]name then ::= or ':' .
  bool definition_ahead() {
    const size_t save = i_;
    if (at('?') || at('!')) ++i_;
    bool yes = false;
    if (!done() && name_char(t_[i_])) {
      while (!done() && name_char(t_[i_])) ++i_;
      while (!done() && (t_[i_] == ' ' || t_[i_] == '\t')) ++i_;
      yes = at("::=") || (at(':') && !at("::"));
    }
    i_ = save;
    return yes;
  }

  void definition() {
    if (at('?') || at('!')) ++i_;
    const std::string n = name();
    skip_space(false);
    if (at("::=")) {
      i_ += 3;
    } else if (at(':')) {
      ++i_;
    } else {
      error(fmt::format("expected '::=' or ':' after '{}'", n));
    }
    const RuleId r = rule_named(n);
    if (g_.rules()[static_cast<size_t>(r)].body >= 0) error(fmt::format("rule '{}' is defined twice", n));
    g_.define(r, alternation());
  }

  void directive() {
    ++i_;
    const std::string d = name();
    if (d != "import") error(fmt::format("'%{}' is not supported", d));
    skip_space(false);
    const std::string what = name();
    if (what.rfind("common.", 0) != 0) error(fmt::format("'%import {}': only common.* is supported", what));
    const std::string term = what.substr(7);
    const auto it = kCommon.find(term);
    if (it == kCommon.end()) error(fmt::format("'%import {}' is not supported", what));
    const RuleId r = rule_named(term);
    g_.define(r, parse_regex(g_, it->second));
  }

  // The end of the current expression: ')' ']' or the next definition or directive.
  bool expression_ends() {
    skip_space();
    return done() || at(')') || at(']') || at('%') || definition_ahead();
  }

  ExprId alternation() {
    return alternatives(g_, t_, i_, [&] { return sequence(); });
  }

  ExprId sequence() {
    std::vector<ExprId> parts;
    while (!expression_ends() && !at('|')) parts.push_back(quantified(atom()));
    return g_.seq(std::move(parts));
  }

  ExprId quantified(ExprId e) {
    for (;;) {
      if (at('*')) {
        ++i_;
        e = g_.star(e);
      } else if (at('+')) {
        ++i_;
        e = g_.repeat(e, 1, kUnbounded);
      } else if (at('?')) {
        ++i_;
        e = g_.optional(e);
      } else if (at('{') && i_ + 1 < t_.size() && std::isdigit(static_cast<unsigned char>(t_[i_ + 1]))) {
        ++i_;
        const int32_t min = count();
        int32_t max = min;
        if (at(',')) {
          ++i_;
          max = at('}') ? kUnbounded : count();
        }
        if (!at('}')) error("expected '}' after a repetition count");
        ++i_;
        if (max != kUnbounded && max < min) error("a repetition {m,n} with m > n");
        e = g_.repeat(e, min, max);
      } else {
        return e;
      }
    }
  }

  int32_t count() {
    int64_t v = 0;
    const size_t from = i_;
    while (!done() && std::isdigit(static_cast<unsigned char>(t_[i_])))
      v = std::min<int64_t>(v * 10 + (t_[i_++] - '0'), 100000);
    if (i_ == from || v > 10000) error("a repetition count must be a number up to 10000");
    return static_cast<int32_t>(v);
  }

  ExprId atom() {
    if (at('(')) {
      ++i_;
      const ExprId e = alternation();
      if (!at(')')) error("expected ')'");
      ++i_;
      return e;
    }
    if (at('"') || at('\'')) return string_or_range();
    if (at('[')) return bracket();
    if (at('/')) return regex();
    if (at('.')) {
      ++i_;
      return utf8_chars(g_, CodepointSet::all());
    }
    if (name_char(t_[i_])) return g_.ref(rule_named(name()));
    error(fmt::format("unexpected '{}'", t_.substr(i_, 1)));
  }

  // GBNF's [a-z] is a class; Lark's [ ... ] is an optional group, unless it reads as a class.
  ExprId bracket() {
    const size_t close = t_.find(']', i_ + 1);
    const std::string_view inside = close == std::string_view::npos ? "" : t_.substr(i_ + 1, close - i_ - 1);
    const bool lark_group = inside.find('"') != std::string_view::npos || inside.find(' ') != std::string_view::npos;
    if (lark_group && inside.find('\\') == std::string_view::npos) {
      ++i_;
      const ExprId e = alternation();
      if (!at(']')) error("expected ']'");
      ++i_;
      return g_.optional(e);
    }
    const size_t from = i_;
    // The class's end: the first ']' not escaped and not first.
    size_t j = i_ + 1;
    if (j < t_.size() && t_[j] == '^') ++j;
    if (j < t_.size() && t_[j] == ']') ++j;
    while (j < t_.size() && t_[j] != ']') j += t_[j] == '\\' ? 2 : 1;
    if (j >= t_.size()) error("unterminated '['");
    i_ = j + 1;
    return parse_regex(g_, t_.substr(from, i_ - from));
  }

  ExprId regex() {
    const size_t from = ++i_;
    while (!done() && !at('/')) i_ += at('\\') ? 2 : 1;
    if (done()) error("unterminated /regex/");
    const std::string_view body = t_.substr(from, i_ - from);
    ++i_;
    if (!done() && std::isalpha(static_cast<unsigned char>(t_[i_]))) error("regex flags are not supported");
    try {
      return parse_regex(g_, body);
    } catch (const Error& e) {
      error(e.what());
    }
  }

  std::string quoted() {
    const char q = t_[i_++];
    std::string out;
    while (!done() && !at(q)) {
      if (at('\n')) error("a string literal runs past the end of its line");
      if (!at('\\')) {
        out += t_[i_++];
        continue;
      }
      ++i_;
      if (done()) break;
      const char c = t_[i_++];
      switch (c) {
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'x':
          out += utf8_encode(hex(2));
          break;
        case 'u':
          out += utf8_encode(hex(4));
          break;
        case 'U':
          out += utf8_encode(hex(8));
          break;
        default:
          out += c;
      }
    }
    if (done()) error("unterminated string literal");
    ++i_;
    if (at('i')) error("case-insensitive literals (\"...\"i) are not supported");
    return out;
  }

  char32_t hex(int n) {
    char32_t v = 0;
    for (int k = 0; k < n; ++k) {
      if (done() || !std::isxdigit(static_cast<unsigned char>(t_[i_]))) error("a bad hexadecimal escape");
      const char h = t_[i_++];
      v = v * 16 + static_cast<char32_t>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
    }
    if (v > kMaxCodepoint) error("an escape beyond U+10FFFF");
    return v;
  }

  ExprId string_or_range() {
    const std::string a = quoted();
    if (!at("..")) return g_.literal(a);
    i_ += 2;
    if (!at('"') && !at('\'')) error("expected a string after '..'");
    const std::string b = quoted();
    size_t ia = 0, ib = 0;
    if (a.empty() || b.empty()) error("a range needs single characters");
    const char32_t lo = utf8::next_codepoint(a, ia), hi = utf8::next_codepoint(b, ib);
    if (ia != a.size() || ib != b.size() || lo > hi) error("a range needs single characters in order");
    return utf8_chars(g_, CodepointSet::range(lo, hi));
  }

  Grammar g_;
  std::string_view t_;
  size_t i_ = 0;
};

}  // namespace

Grammar parse_ebnf(std::string_view text) { return EbnfParser(text).parse(); }

}  // namespace dsv4::grammar
