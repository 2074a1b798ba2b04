#include "grammar/json_schema.h"

#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "core/error.h"
#include "core/utf8.h"
#include "grammar/json_syntax.h"
#include "grammar/regex.h"
#include "grammar/utf8_ranges.h"

namespace dsv4::grammar {
namespace {

using Json = nlohmann::ordered_json;

// Keywords that change nothing about which texts are valid.
const std::set<std::string, std::less<>> kAnnotations = {
    "title",  "description", "default",          "examples",        "$schema",
    "$id",    "$comment",    "deprecated",       "readOnly",        "writeOnly",
    "$defs",  "definitions", "contentMediaType", "contentEncoding", "discriminator",
    "example"};

const std::set<std::string, std::less<>> kKnown = {
    "type",    "enum",        "const",    "properties", "required",         "additionalProperties",
    "items",   "prefixItems", "minItems", "maxItems",   "minLength",        "maxLength",
    "pattern", "format",      "minimum",  "maximum",    "exclusiveMinimum", "exclusiveMaximum",
    "anyOf",   "oneOf",       "allOf",    "$ref",       "nullable",         "uniqueItems"};

constexpr int64_t kMaxBoundedLength = 10000;

// Regexes of the string formats, matched against the string's content. Dates know each month's days
// (February 29 in any year: leap years are left to the model, as llguidance does); RFC 3339's T and Z
// may be lower case.
const std::map<std::string, std::string, std::less<>> kFormats = {
    {"date", R"(\d{4}-((0[13578]|1[02])-(0[1-9]|[12]\d|3[01])|(0[469]|11)-(0[1-9]|[12]\d|30)|02-(0[1-9]|1\d|2\d)))"},
    {"time", R"(([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,9})?([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d))"},
    {"date-time",
     R"(\d{4}-((0[13578]|1[02])-(0[1-9]|[12]\d|3[01])|(0[469]|11)-(0[1-9]|[12]\d|30)|02-(0[1-9]|1\d|2\d))[Tt]([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,9})?([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d))"},
    {"uuid", R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"},
    {"email", R"([A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(\.[A-Za-z0-9-]{1,63}){0,8}\.[A-Za-z]{2,24})"},
    {"ipv4", R"(((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))"},
};

[[noreturn]] void unsupported(const std::string& path, std::string_view what) {
  fail("json_schema: {} at {} is not supported", what, path);
}

std::string child(const std::string& path, std::string_view key) { return path + "/" + std::string(key); }

// Decimal digit strings of one length, from lo to hi (same length), digit by digit.
ExprId digits_between(Grammar& g, std::string_view lo, std::string_view hi) {
  if (lo.empty()) return g.empty();
  if (lo[0] == hi[0]) return g.seq({g.literal(lo.substr(0, 1)), digits_between(g, lo.substr(1), hi.substr(1))});
  const std::string nines(lo.size() - 1, '9'), zeros(lo.size() - 1, '0');
  std::vector<ExprId> alts{g.seq({g.literal(lo.substr(0, 1)), digits_between(g, lo.substr(1), nines)})};
  if (lo[0] + 1 <= hi[0] - 1) {
    alts.push_back(g.seq(
        {g.byte_range(static_cast<uint8_t>(lo[0] + 1), static_cast<uint8_t>(hi[0] - 1)),
         g.repeat(g.byte_range('0', '9'), static_cast<int32_t>(lo.size() - 1), static_cast<int32_t>(lo.size() - 1))}));
  }
  alts.push_back(g.seq({g.literal(hi.substr(0, 1)), digits_between(g, zeros, hi.substr(1))}));
  return g.alt(std::move(alts));
}

constexpr uint64_t kOpen = UINT64_MAX;  // no upper bound

// Non-negative integers in [lo, hi] without leading zeros (hi kOpen: no upper bound).
ExprId naturals(Grammar& g, uint64_t lo, uint64_t hi) {
  if (hi < lo) return g.nothing();
  std::vector<ExprId> alts;
  const std::string a = std::to_string(lo);
  const size_t top = hi != kOpen ? std::to_string(hi).size() : a.size();
  for (size_t len = a.size(); len <= top; ++len) {
    std::string from(len, '0'), to(len, '9');
    from[0] = '1';
    if (len == a.size()) from = a;
    if (hi != kOpen && len == top) to = std::to_string(hi);
    alts.push_back(digits_between(g, from, to));
  }
  if (hi == kOpen) {  // every longer number
    alts.push_back(g.seq({g.byte_range('1', '9'), g.repeat(g.byte_range('0', '9'), static_cast<int32_t>(top),
                                                           std::max(static_cast<int32_t>(top), kMaxJsonDigits - 1))}));
  }
  return g.alt(std::move(alts));
}

// Integers in [lo, hi] (either may be open), as JSON writes them.
ExprId integers(Grammar& g, std::optional<int64_t> lo, std::optional<int64_t> hi) {
  std::vector<ExprId> alts;
  if (!hi || *hi >= 0)
    alts.push_back(naturals(g, lo ? static_cast<uint64_t>(std::max<int64_t>(*lo, 0)) : 0,
                            hi ? static_cast<uint64_t>(*hi) : kOpen));
  if (!lo || *lo < 0) {  // -m with m in [max(1, -hi), -lo]
    const uint64_t m_lo = hi && *hi < 0 ? static_cast<uint64_t>(-(*hi + 1)) + 1 : 1;
    const uint64_t m_hi = lo ? static_cast<uint64_t>(-(*lo + 1)) + 1 : kOpen;
    alts.push_back(g.seq({g.literal("-"), naturals(g, m_lo, m_hi)}));
  }
  return g.alt(std::move(alts));
}

// Non-negative decimals m with lo <= m <= hi (integral bounds): an integer part below hi with any
// fraction, or hi itself with a fraction of zeros.
ExprId magnitudes(Grammar& g, uint64_t lo, uint64_t hi) {
  const ExprId fraction = g.optional(g.seq({g.literal("."), g.repeat(g.byte_range('0', '9'), 1, kMaxJsonDigits)}));
  if (hi == kOpen) return g.seq({naturals(g, lo, kOpen), fraction});
  std::vector<ExprId> alts;
  if (hi > lo) alts.push_back(g.seq({naturals(g, lo, hi - 1), fraction}));
  if (hi >= lo)
    alts.push_back(g.seq({g.literal(std::to_string(hi)),
                          g.optional(g.seq({g.literal("."), g.repeat(g.literal("0"), 1, kMaxJsonDigits)}))}));
  return g.alt(std::move(alts));
}

std::optional<double> number_field(const Json& s, std::string_view key, const std::string& path) {
  const auto it = s.find(std::string(key));
  if (it == s.end()) return std::nullopt;
  if (!it->is_number()) fail("json_schema: '{}' at {} must be a number", key, path);
  return it->get<double>();
}

int64_t length_field(const Json& s, std::string_view key, const std::string& path, int64_t absent) {
  const auto it = s.find(std::string(key));
  if (it == s.end()) return absent;
  if (!it->is_number_integer() || it->get<int64_t>() < 0)
    fail("json_schema: '{}' at {} must be a non-negative integer", key, path);
  return it->get<int64_t>();
}

}  // namespace

JsonSchemaCompiler::JsonSchemaCompiler(Grammar& g, const Json& root) : g_(g), root_(root) {}

ExprId JsonSchemaCompiler::value(const Json& s, const std::string& path) {
  if (s.is_boolean()) {
    if (s.get<bool>()) return g_.ref(json_value_rule(g_));
    fail("json_schema: the schema at {} is false (nothing is valid)", path);
  }
  if (!s.is_object()) fail("json_schema: the schema at {} must be an object or a boolean", path);
  for (const auto& [key, v] : s.items()) {
    if (kAnnotations.contains(key) || kKnown.contains(key)) continue;
    unsupported(path, fmt::format("the keyword '{}'", key));
  }
  if (s.value("uniqueItems", false)) unsupported(path, "'uniqueItems': true");
  ExprId e = -1;
  if (s.contains("$ref")) {
    if (!s["$ref"].is_string()) fail("json_schema: '$ref' at {} must be a string", path);
    e = reference(s["$ref"].get<std::string>(), path);
  } else if (s.contains("const")) {
    e = enumeration(Json::array({s["const"]}));
  } else if (s.contains("enum")) {
    if (!s["enum"].is_array() || s["enum"].empty()) fail("json_schema: 'enum' at {} must be a non-empty array", path);
    e = enumeration(s["enum"]);
  } else if (s.contains("anyOf") || s.contains("oneOf") || s.contains("allOf")) {
    const char* key = s.contains("anyOf") ? "anyOf" : s.contains("oneOf") ? "oneOf" : "allOf";
    const Json& list = s[key];
    if (!list.is_array() || list.empty()) fail("json_schema: '{}' at {} must be a non-empty array", key, path);
    if (std::string_view(key) == "allOf" && list.size() != 1) unsupported(path, "'allOf' of more than one schema");
    std::vector<ExprId> alts;
    for (size_t i = 0; i < list.size(); ++i) alts.push_back(value(list[i], fmt::format("{}/{}/{}", path, key, i)));
    e = g_.alt(std::move(alts));
  } else if (s.contains("type")) {
    const Json& t = s["type"];
    std::vector<ExprId> alts;
    if (t.is_string()) {
      alts.push_back(typed(s, t.get<std::string>(), path));
    } else if (t.is_array() && !t.empty()) {
      for (const Json& one : t) {
        if (!one.is_string()) fail("json_schema: 'type' at {} must hold strings", path);
        alts.push_back(typed(s, one.get<std::string>(), path));
      }
    } else {
      fail("json_schema: 'type' at {} must be a string or a non-empty array", path);
    }
    e = g_.alt(std::move(alts));
  } else if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required")) {
    e = object(s, path);
  } else if (s.contains("items") || s.contains("prefixItems")) {
    e = array(s, path);
  } else {
    e = g_.ref(json_value_rule(g_));
  }
  if (s.value("nullable", false)) e = g_.alt({e, g_.literal("null")});
  return e;
}

ExprId JsonSchemaCompiler::typed(const Json& s, const std::string& type, const std::string& path) {
  if (type == "object") return object(s, path);
  if (type == "array") return array(s, path);
  if (type == "string") return string(s, path);
  if (type == "integer") return number(s, true, path);
  if (type == "number") return number(s, false, path);
  if (type == "boolean") return g_.alt({g_.literal("true"), g_.literal("false")});
  if (type == "null") return g_.literal("null");
  fail("json_schema: unknown type \"{}\" at {}", type, path);
}

// An enum or const value: scalars as JSON writes them, arrays and objects with the same bounded
// whitespace between their tokens as any other value (members in the value's order).
ExprId JsonSchemaCompiler::literal_value(const Json& v) {
  if (!v.is_array() && !v.is_object()) return g_.literal(v.dump());
  const ExprId ws = json_ws(g_), sep = g_.seq({ws, g_.literal(","), ws});
  std::vector<ExprId> parts{g_.literal(v.is_array() ? "[" : "{"), ws};
  bool first = true;
  for (const auto& [key, item] : v.items()) {
    if (!first) parts.push_back(sep);
    first = false;
    if (v.is_object()) parts.insert(parts.end(), {g_.literal(Json(key).dump()), ws, g_.literal(":"), ws});
    parts.push_back(literal_value(item));
  }
  if (!v.empty()) parts.push_back(ws);
  parts.push_back(g_.literal(v.is_array() ? "]" : "}"));
  return g_.seq(std::move(parts));
}

ExprId JsonSchemaCompiler::enumeration(const Json& values) {
  std::vector<ExprId> alts;
  for (const Json& v : values) alts.push_back(literal_value(v));
  return g_.alt(std::move(alts));
}

ExprId JsonSchemaCompiler::reference(const std::string& ref, const std::string& path) {
  if (const auto it = refs_.find(ref); it != refs_.end()) return g_.ref(it->second);
  if (ref.empty() || ref[0] != '#') unsupported(path, fmt::format("the remote '$ref' \"{}\"", ref));
  const Json* target = &root_;
  try {
    if (ref.size() > 1) target = &root_.at(Json::json_pointer(ref.substr(1)));
  } catch (const std::exception&) {
    fail("json_schema: '$ref' \"{}\" at {} points to nothing", ref, path);
  }
  const RuleId r = g_.declare("ref " + ref);
  refs_.emplace(ref, r);  // before compiling the target, so that recursion refers to the rule
  g_.define(r, value(*target, ref));
  return g_.ref(r);
}

ExprId JsonSchemaCompiler::string(const Json& s, const std::string& path) {
  const int64_t min = length_field(s, "minLength", path, 0), max = length_field(s, "maxLength", path, -1);
  if (max > kMaxBoundedLength || min > kMaxBoundedLength)
    unsupported(path, fmt::format("a string length bound over {}", kMaxBoundedLength));
  if (max >= 0 && min > max) fail("json_schema: minLength > maxLength at {}", path);
  const bool pattern = s.contains("pattern"), format = s.contains("format");
  if ((pattern || format) && (min > 0 || max >= 0)) unsupported(path, "a length bound with 'pattern' or 'format'");
  if (pattern && format) unsupported(path, "'pattern' with 'format'");
  if (pattern || format) {
    std::string re;
    if (pattern) {
      if (!s["pattern"].is_string()) fail("json_schema: 'pattern' at {} must be a string", path);
      re = s["pattern"].get<std::string>();
    } else {
      const std::string f = s["format"].is_string() ? s["format"].get<std::string>() : "";
      const auto it = kFormats.find(f);
      if (it == kFormats.end()) unsupported(path, fmt::format("the string format \"{}\"", f));
      re = it->second;
    }
    try {
      return g_.seq({g_.literal("\""), parse_regex(g_, re, RegexTarget::kJsonString), g_.literal("\"")});
    } catch (const Error& e) {
      fail("json_schema: 'pattern' at {}: {}", path, e.what());
    }
  }
  return json_string(g_, static_cast<int32_t>(min), max < 0 ? kUnbounded : static_cast<int32_t>(max));
}

ExprId JsonSchemaCompiler::number(const Json& s, bool integer, const std::string& path) {
  if (s.contains("multipleOf")) unsupported(path, "'multipleOf'");
  const auto min = number_field(s, "minimum", path), max = number_field(s, "maximum", path);
  const auto xmin = number_field(s, "exclusiveMinimum", path), xmax = number_field(s, "exclusiveMaximum", path);
  if (!min && !max && !xmin && !xmax) return json_number(g_, integer);
  constexpr double kLimit = 9.0e15;  // exact in a double and an int64
  const auto in_range = [&](std::optional<double> v, const char* key) {
    if (v && std::fabs(*v) > kLimit) unsupported(path, fmt::format("'{}' beyond ±9e15", key));
  };
  in_range(min, "minimum"), in_range(max, "maximum"), in_range(xmin, "exclusiveMinimum"),
      in_range(xmax, "exclusiveMaximum");
  if (integer) {
    std::optional<int64_t> lo, hi;
    if (min) lo = static_cast<int64_t>(std::ceil(*min));
    if (xmin) lo = std::max(lo.value_or(INT64_MIN), static_cast<int64_t>(std::floor(*xmin)) + 1);
    if (max) hi = static_cast<int64_t>(std::floor(*max));
    if (xmax) hi = std::min(hi.value_or(INT64_MAX), static_cast<int64_t>(std::ceil(*xmax)) - 1);
    if (lo && hi && *lo > *hi) fail("json_schema: no integer lies between the bounds at {}", path);
    return integers(g_, lo, hi);
  }
  if (xmin || xmax) unsupported(path, "'exclusiveMinimum' / 'exclusiveMaximum' on a 'number'");
  if ((min && *min != std::floor(*min)) || (max && *max != std::floor(*max)))
    unsupported(path, "a fractional 'minimum' / 'maximum' on a 'number'");
  if (min && max && *min > *max) fail("json_schema: minimum > maximum at {}", path);
  const std::optional<int64_t> lo = min ? std::optional<int64_t>(static_cast<int64_t>(*min)) : std::nullopt;
  const std::optional<int64_t> hi = max ? std::optional<int64_t>(static_cast<int64_t>(*max)) : std::nullopt;
  std::vector<ExprId> alts;
  if (!hi || *hi >= 0)
    alts.push_back(magnitudes(g_, static_cast<uint64_t>(std::max<int64_t>(lo.value_or(0), 0)),
                              hi ? static_cast<uint64_t>(*hi) : kOpen));
  if (!lo || *lo < 0) {  // -m with -hi <= m <= -lo; m = 0 only when 0 is in range
    const uint64_t m_lo = hi && *hi < 0 ? static_cast<uint64_t>(-*hi) : 0;
    const uint64_t m_hi = lo ? static_cast<uint64_t>(-*lo) : kOpen;
    alts.push_back(g_.seq({g_.literal("-"), magnitudes(g_, m_lo, m_hi)}));
  }
  return g_.alt(std::move(alts));
}

ExprId JsonSchemaCompiler::array(const Json& s, const std::string& path) {
  const int64_t min = length_field(s, "minItems", path, 0), max = length_field(s, "maxItems", path, -1);
  if (max >= 0 && min > max) fail("json_schema: minItems > maxItems at {}", path);
  if (min > kMaxBoundedLength || max > kMaxBoundedLength)
    unsupported(path, fmt::format("an item count bound over {}", kMaxBoundedLength));
  const ExprId ws = json_ws(g_), sep = g_.seq({ws, g_.literal(","), ws});
  if (s.contains("prefixItems")) {
    const Json& prefix = s["prefixItems"];
    if (!prefix.is_array()) fail("json_schema: 'prefixItems' at {} must be an array", path);
    const auto n = static_cast<int64_t>(prefix.size());
    if (!(s.contains("items") && s["items"] == false) || (s.contains("minItems") && min != n) || (max >= 0 && max != n))
      unsupported(path, "'prefixItems' other than a fixed tuple (with \"items\": false)");
    std::vector<ExprId> parts{g_.literal("["), ws};
    for (int64_t i = 0; i < n; ++i) {
      if (i > 0) parts.push_back(sep);
      parts.push_back(value(prefix[static_cast<size_t>(i)], fmt::format("{}/prefixItems/{}", path, i)));
    }
    parts.push_back(ws);
    parts.push_back(g_.literal("]"));
    return g_.seq(std::move(parts));
  }
  const Json items = s.contains("items") ? s["items"] : Json(true);
  if (items == false) return g_.seq({g_.literal("["), ws, g_.literal("]")});
  // The item once, as a rule, so that bounded counts repeat a call rather than the item's automaton.
  const RuleId item = g_.rule(fmt::format("items {}", path), value(items, child(path, "items")));
  const ExprId more = g_.seq({sep, g_.ref(item)});
  const int32_t more_max = max < 0 ? kUnbounded : static_cast<int32_t>(max - 1);
  if (max == 0) return g_.seq({g_.literal("["), ws, g_.literal("]")});
  const ExprId list =
      g_.seq({g_.ref(item), g_.repeat(more, static_cast<int32_t>(std::max<int64_t>(min - 1, 0)), more_max)});
  return g_.seq({g_.literal("["), ws, min > 0 ? list : g_.optional(g_.seq({list, ws})), min > 0 ? ws : g_.empty(),
                 g_.literal("]")});
}

// Property names are written as JSON strings; an extra key (additionalProperties) is any string of
// unescaped characters that is none of the named ones (a trie of their characters: at each node,
// leave the trie by a character no name continues with, or go on).
ExprId JsonSchemaCompiler::extra_key(const std::vector<std::string>& taken) {
  struct Node {
    std::map<char32_t, int> next;
    bool end = false;
  };
  std::vector<Node> trie(1);
  for (const std::string& name : taken) {
    int at = 0;
    for (size_t i = 0; i < name.size();) {
      const char32_t c = utf8::next_codepoint(name, i);
      auto it = trie[static_cast<size_t>(at)].next.find(c);
      if (it == trie[static_cast<size_t>(at)].next.end()) {
        trie.emplace_back();
        it = trie[static_cast<size_t>(at)].next.emplace(c, static_cast<int>(trie.size() - 1)).first;
      }
      at = it->second;
    }
    trie[static_cast<size_t>(at)].end = true;
  }
  const CodepointSet plain = CodepointSet::range(0x20, kMaxCodepoint)
                                 .minus(CodepointSet::range('"', '"'))
                                 .minus(CodepointSet::range('\\', '\\'));
  const ExprId any = g_.star(utf8_chars(g_, plain));
  const auto build = [&](auto&& self, int at) -> ExprId {
    const Node& n = trie[static_cast<size_t>(at)];
    std::vector<ExprId> alts;
    if (!n.end) alts.push_back(g_.empty());
    CodepointSet leave = plain;
    for (const auto& [c, next] : n.next) {
      leave = leave.minus(CodepointSet::range(c, c));
      alts.push_back(g_.seq({utf8_chars(g_, CodepointSet::range(c, c)), self(self, next)}));
    }
    if (!leave.empty()) alts.push_back(g_.seq({utf8_chars(g_, leave), any}));
    return g_.alt(std::move(alts));
  };
  return g_.seq({g_.literal("\""), build(build, 0), g_.literal("\"")});
}

// Members in schema order. With optional members the comma before a member depends on whether one
// was written already: two rules per position (none yet / some), each calling the next in tail
// position, so the automaton stays linear in the number of properties.
ExprId JsonSchemaCompiler::object(const Json& s, const std::string& path) {
  for (const char* k : {"minProperties", "maxProperties", "patternProperties", "propertyNames"})
    if (s.contains(k)) unsupported(path, fmt::format("the keyword '{}'", k));
  const Json empty_object = Json::object();
  const Json& props = s.contains("properties") ? s["properties"] : empty_object;
  if (!props.is_object()) fail("json_schema: 'properties' at {} must be an object", path);
  std::set<std::string> required;
  if (s.contains("required")) {
    if (!s["required"].is_array()) fail("json_schema: 'required' at {} must be an array", path);
    for (const Json& r : s["required"]) {
      if (!r.is_string()) fail("json_schema: 'required' at {} must hold strings", path);
      if (!props.contains(r.get<std::string>()))
        unsupported(
            path, fmt::format("the required property \"{}\" that 'properties' does not define", r.get<std::string>()));
      required.insert(r.get<std::string>());
    }
  }
  const Json additional = s.contains("additionalProperties") ? s["additionalProperties"] : Json(false);
  if (!additional.is_boolean() && !additional.is_object())
    fail("json_schema: 'additionalProperties' at {} must be a boolean or a schema", path);
  const ExprId ws = json_ws(g_), sep = g_.seq({ws, g_.literal(","), ws});
  std::vector<ExprId> members;
  std::vector<std::string> names;
  for (const auto& [name, sub] : props.items()) {
    names.push_back(name);
    members.push_back(g_.seq(
        {g_.literal(Json(name).dump()), ws, g_.literal(":"), ws, value(sub, child(child(path, "properties"), name))}));
  }
  std::optional<ExprId> extra;
  if (additional != false) {
    extra = g_.seq({extra_key(names), ws, g_.literal(":"), ws, value(additional, child(path, "additionalProperties"))});
  }
  const auto wrap = [&](ExprId body) { return g_.seq({g_.literal("{"), ws, body, ws, g_.literal("}")}); };
  if (required.size() == names.size() && !extra) {  // every member, in order
    std::vector<ExprId> parts;
    for (size_t i = 0; i < members.size(); ++i) {
      if (i > 0) parts.push_back(sep);
      parts.push_back(members[i]);
    }
    return wrap(g_.seq(std::move(parts)));
  }
  const int id = lanes_++;
  const size_t n = members.size();
  std::vector<std::array<RuleId, 2>> lane(n + 1);
  for (size_t i = 0; i <= n; ++i)
    for (int some = 0; some < 2; ++some)
      lane[i][static_cast<size_t>(some)] = g_.declare(fmt::format("members {} {} {}", id, i, some));
  for (int some = 0; some < 2; ++some) {
    ExprId tail = g_.empty();
    if (extra) {
      const ExprId rest = g_.star(g_.seq({sep, *extra}));
      tail = some ? rest : g_.optional(g_.seq({*extra, rest}));
    }
    g_.define(lane[n][static_cast<size_t>(some)], tail);
  }
  for (size_t i = n; i-- > 0;) {
    for (int some = 0; some < 2; ++some) {
      std::vector<ExprId> alts{g_.seq({some ? sep : g_.empty(), members[i], g_.ref(lane[i + 1][1])})};
      if (!required.contains(names[i])) alts.push_back(g_.ref(lane[i + 1][static_cast<size_t>(some)]));
      g_.define(lane[i][static_cast<size_t>(some)], g_.alt(std::move(alts)));
    }
  }
  return wrap(g_.ref(lane[0][0]));
}

Grammar json_schema_grammar(const Json& schema) {
  Grammar g;
  JsonSchemaCompiler c(g, schema);
  g.set_root(g.rule("root", c.value(schema)));
  return g;
}

Grammar json_object_grammar() {
  Grammar g;
  g.set_root(g.rule("root", json_any_object(g)));
  return g;
}

}  // namespace dsv4::grammar
