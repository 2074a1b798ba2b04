#include "chat/python_json.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "core/error.h"
#include "core/utf8.h"

namespace dsv4::chat {
namespace {

using ordered_json = nlohmann::ordered_json;

void append_quoted(std::string& out, std::string_view s) {
  std::string repaired;  // broken bytes become U+FFFD (core/utf8.h), characters are kept whole
  if (!utf8::is_valid(s)) s = repaired = utf8::lossy(s);
  out += '"';
  for (const char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) {
      out += c;
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));  // Python writes lowercase hex
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

void append_value(std::string& out, const ordered_json& v) {
  switch (v.type()) {
    case ordered_json::value_t::null:
      out += "null";
      return;
    case ordered_json::value_t::boolean:
      out += v.get<bool>() ? "true" : "false";
      return;
    case ordered_json::value_t::number_integer:
      out += std::to_string(v.get<int64_t>());
      return;
    case ordered_json::value_t::number_unsigned:
      out += std::to_string(v.get<uint64_t>());
      return;
    case ordered_json::value_t::number_float:
      out += python_float_repr(v.get<double>());
      return;
    case ordered_json::value_t::string:
      append_quoted(out, v.get_ref<const std::string&>());
      return;
    case ordered_json::value_t::array: {
      out += '[';
      bool first = true;
      for (const auto& e : v) {
        if (!first) out += ", ";
        first = false;
        append_value(out, e);
      }
      out += ']';
      return;
    }
    case ordered_json::value_t::object: {
      out += '{';
      bool first = true;
      for (const auto& [k, e] : v.items()) {
        if (!first) out += ", ";
        first = false;
        append_quoted(out, k);
        out += ": ";
        append_value(out, e);
      }
      out += '}';
      return;
    }
    default:
      fail("python_json_dumps: a {} value has no JSON text", v.type_name());
  }
}

}  // namespace

std::string python_float_repr(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "Infinity" : "-Infinity";
  // Shortest round-trip digits, as Python's dtoa mode 0 finds them: "d.ddde±X".
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), x, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
  std::string out;
  if (sci.front() == '-') {
    out += '-';
    sci.remove_prefix(1);
  }
  const size_t e = sci.find('e');
  std::string digits(1, sci[0]);
  if (e > 1) digits += sci.substr(2, e - 2);                                // skip the '.'
  const int decpt = std::atoi(std::string(sci.substr(e + 1)).c_str()) + 1;  // value = 0.DIGITS * 10^decpt
  const int n = static_cast<int>(digits.size());
  const auto at = [](int i) { return static_cast<size_t>(i); };
  if (decpt <= -4 || decpt > 16) {  // Python's repr switches to exponent form outside this range
    out.push_back(digits[0]);
    if (n > 1) out.append(".").append(digits, 1);
    const int exp10 = decpt - 1;
    out.append(fmt::format("e{}{:02d}", exp10 < 0 ? '-' : '+', std::abs(exp10)));
  } else if (decpt <= 0) {
    out.append("0.").append(at(-decpt), '0').append(digits);
  } else if (decpt < n) {
    out.append(digits, 0, at(decpt)).append(".").append(digits, at(decpt));
  } else {
    out.append(digits).append(at(decpt - n), '0').append(".0");
  }
  return out;
}

std::string python_json_quote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  append_quoted(out, s);
  return out;
}

std::string python_json_dumps(const nlohmann::ordered_json& value) {
  std::string out;
  append_value(out, value);
  return out;
}

}  // namespace dsv4::chat
