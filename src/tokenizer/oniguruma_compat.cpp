#include "tokenizer/oniguruma_compat.h"

#include <fmt/format.h>

#include <cctype>

#include "core/error.h"
#include "tokenizer/unicode_delta.h"

namespace dsv4 {
namespace {

constexpr std::string_view kDeltaCategories = "LMNPS";
constexpr std::string_view kPlainCategories = "Z";
// Escapes that mean the same in both engines (control characters, hex code points, anchors).
constexpr std::string_view kSameEscapes = "tnrfaexAzZ";

void append_delta(char category, std::string& out) {
  for (const CodeRange& r : unicode_delta(category)) {
    out += fmt::format("\\x{{{:X}}}", static_cast<uint32_t>(r.first));
    if (r.last != r.first) out += fmt::format("-\\x{{{:X}}}", static_cast<uint32_t>(r.last));
  }
}

class Translator {
 public:
  explicit Translator(std::string_view pattern) : p_(pattern) {}

  std::string run() {
    out_.reserve(p_.size() * 2);
    while (i_ < p_.size()) {
      const char c = p_[i_++];
      if (c == '\\') {
        escape();
      } else if (c == '[') {
        open_class();
      } else if (c == ']' && in_class_) {
        in_class_ = false;
        out_ += c;
      } else if (c == '&' && in_class_ && i_ < p_.size() && p_[i_] == '&') {
        refuse("class intersection &&");
      } else {
        out_ += c;
      }
    }
    if (in_class_) refuse("an unterminated character class");
    return std::move(out_);
  }

 private:
  [[noreturn]] void refuse(std::string_view what) const {
    fail("Split regex {:?}: {} is not supported (its meaning differs between Oniguruma and PCRE2)", std::string(p_),
         what);
  }

  void open_class() {
    if (in_class_) {
      if (i_ < p_.size() && p_[i_] == ':') refuse("a POSIX class [:...:]");
      refuse("a nested character class");
    }
    in_class_ = true;
    out_ += '[';
    if (i_ < p_.size() && p_[i_] == '^') out_ += p_[i_++];
    if (i_ < p_.size() && p_[i_] == ']') out_ += p_[i_++];  // a leading ] is literal in both engines
  }

  void escape() {
    if (i_ >= p_.size()) refuse("a trailing backslash");
    const char c = p_[i_++];
    if (c == 's') {
      out_ += "\\p{White_Space}";
    } else if (c == 'S') {
      out_ += "\\P{White_Space}";
    } else if (c == 'p' || c == 'P') {
      property(c == 'P');
    } else if (c == 'u') {
      unicode_escape();
    } else if (std::isalnum(static_cast<unsigned char>(c)) && kSameEscapes.find(c) == std::string_view::npos) {
      refuse(fmt::format("the escape \\{}", c));
    } else {
      out_ += '\\';
      out_ += c;
    }
  }

  void property(bool negated) {
    std::string name;
    if (i_ < p_.size() && p_[i_] == '{') {
      const size_t close = p_.find('}', i_);
      if (close == std::string_view::npos) refuse("an unterminated \\p{");
      name = std::string(p_.substr(i_ + 1, close - i_ - 1));
      i_ = close + 1;
    } else if (i_ < p_.size()) {
      name = std::string(1, p_[i_++]);
    }
    if (!name.empty() && name[0] == '^') {
      negated = !negated;
      name.erase(0, 1);
    }
    const bool delta = name.size() == 1 && kDeltaCategories.find(name[0]) != std::string_view::npos;
    const bool plain = name.size() == 1 && kPlainCategories.find(name[0]) != std::string_view::npos;
    if (!delta && !plain) refuse(fmt::format("the Unicode property \\p{{{}}} (supported: L M N P S Z)", name));
    if (plain) {
      out_ += fmt::format("\\{}{{{}}}", negated ? 'P' : 'p', name);
    } else if (in_class_) {
      if (negated) refuse(fmt::format("\\P{{{}}} inside a character class", name));
      out_ += fmt::format("\\p{{{}}}", name);
      append_delta(name[0], out_);
    } else {
      out_ += negated ? "[^" : "[";
      out_ += fmt::format("\\p{{{}}}", name);
      append_delta(name[0], out_);
      out_ += ']';
    }
  }

  void unicode_escape() {
    if (i_ + 4 > p_.size()) refuse("a short \\u escape");
    const std::string_view hex = p_.substr(i_, 4);
    for (const char h : hex)
      if (!std::isxdigit(static_cast<unsigned char>(h))) refuse("a malformed \\u escape");
    out_ += fmt::format("\\x{{{}}}", hex);
    i_ += 4;
  }

  std::string_view p_;
  size_t i_ = 0;
  bool in_class_ = false;
  std::string out_;
};

}  // namespace

std::string oniguruma_to_pcre2(std::string_view pattern) { return Translator(pattern).run(); }

}  // namespace dsv4
