#include "grammar/regex.h"

#include <cctype>

#include "core/error.h"
#include "core/utf8.h"
#include "grammar/json_syntax.h"
#include "grammar/utf8_ranges.h"

namespace dsv4::grammar {
namespace {

constexpr int32_t kMaxRepeat = 10000;

CodepointSet digits() { return CodepointSet::range('0', '9'); }
CodepointSet word_chars() {
  CodepointSet s = CodepointSet::range('0', '9');
  s.add('A', 'Z');
  s.add('a', 'z');
  s.add('_', '_');
  return s;
}
CodepointSet spaces() {
  CodepointSet s = CodepointSet::range('\t', '\r');  // \t \n \v \f \r
  s.add(' ', ' ');
  return s;
}

class RegexParser {
 public:
  RegexParser(Grammar& g, std::string_view p, RegexTarget t) : g_(g), p_(p), target_(t) {
    DSV4_CHECK(utf8::is_valid(p), "regex: the pattern is not valid UTF-8");
  }

  ExprId parse() {
    if (at('^')) ++i_;
    const ExprId e = alternation();
    if (at('$') && i_ + 1 == p_.size()) ++i_;
    if (i_ < p_.size()) {
      if (at(')')) fail("regex: unbalanced ')' at offset {} of /{}/", i_, p_);
      fail("regex: '{}' at offset {} of /{}/ is not supported (anchors only at the ends)", p_[i_], i_, p_);
    }
    return e;
  }

 private:
  bool at(char c) const { return i_ < p_.size() && p_[i_] == c; }
  bool done() const { return i_ >= p_.size(); }
  [[noreturn]] void unsupported(std::string_view what) const {
    fail("regex: {} (at offset {} of /{}/) is not supported: it needs more than a finite automaton", what, i_, p_);
  }

  ExprId chars(const CodepointSet& s) {
    return target_ == RegexTarget::kJsonString ? json_string_char(g_, s) : utf8_chars(g_, s);
  }

  ExprId alternation() {
    return alternatives(g_, p_, i_, [&] { return sequence(); });
  }

  ExprId sequence() {
    std::vector<ExprId> parts;
    while (!done() && !at('|') && !at(')')) {
      if (at('$') && i_ + 1 == p_.size()) break;
      parts.push_back(quantified(atom()));
    }
    return g_.seq(std::move(parts));
  }

  ExprId quantified(ExprId e) {
    for (;;) {
      int32_t min = 0, max = 0;
      if (at('*')) {
        max = kUnbounded;
        ++i_;
      } else if (at('+')) {
        min = 1;
        max = kUnbounded;
        ++i_;
      } else if (at('?')) {
        max = 1;
        ++i_;
      } else if (at('{') && braces(min, max)) {
      } else {
        return e;
      }
      if (at('?')) ++i_;  // lazy: the same texts
      if (at('+')) unsupported("a possessive quantifier");
      e = g_.repeat(e, min, max);
    }
  }

  // {n}, {n,}, {n,m}; false (nothing read) when the brace is a literal.
  bool braces(int32_t& min, int32_t& max) {
    size_t j = i_ + 1;
    const auto number = [&](int32_t& out) {
      const size_t from = j;
      int64_t v = 0;
      while (j < p_.size() && p_[j] >= '0' && p_[j] <= '9')
        v = std::min<int64_t>(v * 10 + (p_[j++] - '0'), kMaxRepeat + 1);
      out = static_cast<int32_t>(v);
      return j > from;
    };
    if (!number(min)) return false;
    max = min;
    if (j < p_.size() && p_[j] == ',') {
      ++j;
      if (!number(max)) max = kUnbounded;
    }
    if (j >= p_.size() || p_[j] != '}') return false;
    DSV4_CHECK(min <= kMaxRepeat && max <= kMaxRepeat, "regex: a repetition bound over {} in /{}/", kMaxRepeat, p_);
    DSV4_CHECK(max == kUnbounded || min <= max, "regex: {{{},{}}} has min > max in /{}/", min, max, p_);
    i_ = j + 1;
    return true;
  }

  ExprId atom() {
    const char c = p_[i_];
    if (c == '(') return group();
    if (c == '[') return chars(char_class());
    if (c == '.') {
      ++i_;
      return chars(CodepointSet::all().minus(CodepointSet::range('\n', '\n')));
    }
    if (c == '\\') return chars(escape(/*in_class=*/false));
    if (c == '*' || c == '+' || c == '?') fail("regex: nothing to repeat at offset {} of /{}/", i_, p_);
    if (c == '^' || c == '$') unsupported("an anchor inside the pattern");
    const char32_t cp = literal();
    return chars(CodepointSet::range(cp, cp));
  }

  char32_t literal() { return utf8::next_codepoint(p_, i_); }

  ExprId group() {
    ++i_;
    if (at('?')) {
      ++i_;
      if (at(':')) {
        ++i_;
      } else if (at('P') && i_ + 1 < p_.size() && p_[i_ + 1] == '<') {
        skip_name(i_ + 2);
      } else if (at('<') && i_ + 1 < p_.size() && p_[i_ + 1] != '=' && p_[i_ + 1] != '!') {
        skip_name(i_ + 1);
      } else {
        unsupported("a lookaround or inline flag group '(?'");
      }
    }
    const ExprId e = alternation();
    if (!at(')')) fail("regex: unbalanced '(' in /{}/", p_);
    ++i_;
    return e;
  }

  void skip_name(size_t from) {
    const size_t close = p_.find('>', from);
    if (close == std::string_view::npos) fail("regex: unterminated group name in /{}/", p_);
    i_ = close + 1;
  }

  CodepointSet char_class() {
    ++i_;
    const bool negate = at('^');
    if (negate) ++i_;
    CodepointSet set;
    bool first = true;
    while (!done() && (!at(']') || first)) {
      first = false;
      if (at('[') && i_ + 1 < p_.size() && p_[i_ + 1] == ':') unsupported("a POSIX class [:name:]");
      CodepointSet item;
      char32_t lo = 0;
      bool single = true;
      if (at('\\')) {
        item = escape(/*in_class=*/true);
        single = item.ranges().size() == 1 && item.ranges()[0].first == item.ranges()[0].second;
        lo = single ? item.ranges()[0].first : 0;
      } else {
        lo = literal();
        item = CodepointSet::range(lo, lo);
      }
      if (single && at('-') && i_ + 1 < p_.size() && p_[i_ + 1] != ']') {
        ++i_;
        const char32_t hi = at('\\') ? single_escape() : literal();
        DSV4_CHECK(lo <= hi, "regex: the range is out of order in /{}/", p_);
        item = CodepointSet::range(lo, hi);
      }
      set.add(item);
    }
    if (!at(']')) fail("regex: unterminated '[' in /{}/", p_);
    ++i_;
    return negate ? set.complement() : set;
  }

  char32_t single_escape() {
    const CodepointSet s = escape(true);
    if (s.ranges().size() != 1 || s.ranges()[0].first != s.ranges()[0].second)
      fail("regex: a class escape cannot end a range in /{}/", p_);
    return s.ranges()[0].first;
  }

  char32_t hex(size_t digits_min, size_t digits_max, char close) {
    char32_t v = 0;
    size_t n = 0;
    while (n < digits_max && !done() && std::isxdigit(static_cast<unsigned char>(p_[i_])) && p_[i_] != close) {
      const char h = p_[i_++];
      v = v * 16 + static_cast<char32_t>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
      ++n;
    }
    DSV4_CHECK(n >= digits_min && v <= kMaxCodepoint, "regex: a bad hexadecimal escape in /{}/", p_);
    return v;
  }

  CodepointSet escape(bool in_class) {
    ++i_;
    if (done()) fail("regex: the pattern ends with '\\' in /{}/", p_);
    const char c = p_[i_++];
    const auto one = [](char32_t x) { return CodepointSet::range(x, x); };
    switch (c) {
      case 'd':
        return digits();
      case 'D':
        return digits().complement();
      case 'w':
        return word_chars();
      case 'W':
        return word_chars().complement();
      case 's':
        return spaces();
      case 'S':
        return spaces().complement();
      case 'n':
        return one('\n');
      case 'r':
        return one('\r');
      case 't':
        return one('\t');
      case 'f':
        return one('\f');
      case 'v':
        return one('\v');
      case '0':
        return one(0);
      case 'x':
        if (at('{')) {
          ++i_;
          const char32_t v = hex(1, 6, '}');
          if (!at('}')) fail("regex: unterminated \\x{{ in /{}/", p_);
          ++i_;
          return one(v);
        }
        return one(hex(2, 2, 0));
      case 'u':
        return one(hex(4, 4, 0));
      case 'b':
        if (in_class) return one('\b');
        unsupported("\\b (a word boundary)");
      case 'B':
      case 'A':
      case 'z':
      case 'Z':
      case 'G':
        unsupported(fmt::format("the assertion \\{}", c));
      case 'p':
      case 'P':
        unsupported(fmt::format("the Unicode property \\{}", c));
      default:
        break;
    }
    if (c >= '1' && c <= '9') unsupported("a backreference");
    if (std::isalnum(static_cast<unsigned char>(c))) fail("regex: unknown escape \\{} in /{}/", c, p_);
    --i_;
    const char32_t cp = utf8::next_codepoint(p_, i_);
    return one(cp);
  }

  Grammar& g_;
  std::string_view p_;
  RegexTarget target_;
  size_t i_ = 0;
};

}  // namespace

ExprId parse_regex(Grammar& g, std::string_view pattern, RegexTarget target) {
  return RegexParser(g, pattern, target).parse();
}

}  // namespace dsv4::grammar

namespace dsv4::grammar {

Grammar regex_grammar(std::string_view pattern) {
  Grammar g;
  g.set_root(g.rule("root", parse_regex(g, pattern)));
  return g;
}

}  // namespace dsv4::grammar
