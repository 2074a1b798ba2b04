// JSON schemas: documents valid by a schema (random instances, written with random whitespace) are
// accepted; whatever the grammar accepts (random walks through the masks, random edits of valid
// documents) parses and validates (an independent validator of the subset, below); random schemas too.
// Unsupported keywords are refused by name.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "grammar/json_schema.h"

#include <pcre2.h>

#include <nlohmann/json.hpp>

#include "core/utf8.h"
#include "grammar/json_syntax.h"
#include "grammar_testing.h"
#include "testing/error_of.h"

namespace dsv4::grammar {
namespace {

using Json = nlohmann::ordered_json;
using testing::accepts;
using testing::compile;

bool search(const std::string& pattern, const std::string& s) {
  int err = 0;
  PCRE2_SIZE off = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF, &err, &off, nullptr);
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(code, nullptr);
  const bool m = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, 0, data, nullptr) >= 0;
  pcre2_match_data_free(data);
  pcre2_code_free(code);
  return m;
}

size_t chars(const std::string& s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++i) n += (static_cast<unsigned char>(s[i]) & 0xC0) != 0x80;
  return n;
}

// JSON Schema validation of the subset the compiler supports (written from the specification).
bool valid(const Json& s, const Json& root, const Json& v) {
  if (s.is_boolean()) return s.get<bool>();
  if (s.value("nullable", false) && v.is_null()) return true;
  if (s.contains("$ref")) {
    const std::string ref = s["$ref"];
    return valid(ref == "#" ? root : root.at(Json::json_pointer(ref.substr(1))), root, v);
  }
  if (s.contains("const") && v != s["const"]) return false;
  if (s.contains("enum") && std::find(s["enum"].begin(), s["enum"].end(), v) == s["enum"].end()) return false;
  if (s.contains("anyOf") &&
      std::none_of(s["anyOf"].begin(), s["anyOf"].end(), [&](const Json& x) { return valid(x, root, v); }))
    return false;
  if (s.contains("allOf") &&
      !std::all_of(s["allOf"].begin(), s["allOf"].end(), [&](const Json& x) { return valid(x, root, v); }))
    return false;
  if (s.contains("type")) {
    const std::string t = s["type"];
    const bool ok = t == "object"    ? v.is_object()
                    : t == "array"   ? v.is_array()
                    : t == "string"  ? v.is_string()
                    : t == "integer" ? v.is_number_integer() ||
                                           (v.is_number_float() && v.get<double>() == std::floor(v.get<double>()))
                    : t == "number"  ? v.is_number()
                    : t == "boolean" ? v.is_boolean()
                                     : v.is_null();
    if (!ok) return false;
  }
  if (v.is_object()) {
    const Json props = s.value("properties", Json::object());
    for (const auto& r : s.value("required", Json::array()))
      if (!v.contains(r.get<std::string>())) return false;
    const Json extra = s.value("additionalProperties", Json(false));
    for (const auto& [k, x] : v.items()) {
      if (props.contains(k)) {
        if (!valid(props[k], root, x)) return false;
      } else if ((s.contains("properties") || s.contains("additionalProperties")) && !valid(extra, root, x)) {
        return false;
      }
    }
  }
  if (v.is_array()) {
    if (v.size() < s.value("minItems", size_t{0}) || v.size() > s.value("maxItems", SIZE_MAX)) return false;
    for (size_t i = 0; i < v.size(); ++i) {
      const Json& item = s.contains("prefixItems") && i < s["prefixItems"].size() ? s["prefixItems"][i]
                         : s.contains("prefixItems")                              ? s.value("items", Json(true))
                                                                                  : s.value("items", Json(true));
      if (!valid(item, root, v[i])) return false;
    }
  }
  if (v.is_string()) {
    const std::string& str = v.get_ref<const std::string&>();
    if (chars(str) < s.value("minLength", size_t{0}) || chars(str) > s.value("maxLength", SIZE_MAX)) return false;
    if (s.contains("pattern") && !search(s["pattern"], str)) return false;
  }
  if (v.is_number()) {
    const double x = v.get<double>();
    if (s.contains("minimum") && x < s["minimum"].get<double>()) return false;
    if (s.contains("maximum") && x > s["maximum"].get<double>()) return false;
    if (s.contains("exclusiveMinimum") && x <= s["exclusiveMinimum"].get<double>()) return false;
    if (s.contains("exclusiveMaximum") && x >= s["exclusiveMaximum"].get<double>()) return false;
  }
  return true;
}

// A JSON text of v with random whitespace between tokens (members in their order).
void write(const Json& v, std::string& out, std::mt19937_64& rng) {
  const auto ws = [&] {
    static const char* kWs[] = {"", "", " ", "\n", "\n  ", "\t"};
    out += kWs[rng() % 6];
  };
  if (v.is_object()) {
    out += '{';
    ws();
    bool first = true;
    for (const auto& [k, x] : v.items()) {
      if (!first) ws(), out += ',', ws();
      first = false;
      out += Json(k).dump();
      ws();
      out += ':';
      ws();
      write(x, out, rng);
    }
    if (!v.empty()) ws();
    out += '}';
  } else if (v.is_array()) {
    out += '[';
    ws();
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) ws(), out += ',', ws();
      write(v[i], out, rng);
    }
    if (!v.empty()) ws();
    out += ']';
  } else {
    out += v.dump();
  }
}

// A random valid instance (for schemas without pattern or format).
Json instance(const Json& s, const Json& root, std::mt19937_64& rng, int depth = 0) {
  if (s.is_boolean()) return rng() % 2 ? Json(1) : Json("x");
  if (s.contains("$ref")) {
    const std::string ref = s["$ref"];
    return instance(ref == "#" ? root : root.at(Json::json_pointer(ref.substr(1))), root, rng, depth + 1);
  }
  if (s.contains("const")) return s["const"];
  if (s.contains("enum")) return s["enum"][rng() % s["enum"].size()];
  if (s.contains("anyOf")) return instance(s["anyOf"][rng() % s["anyOf"].size()], root, rng, depth);
  const std::string t = s.value("type", "object");
  if (t == "object") {
    Json o = Json::object();
    const Json req = s.value("required", Json::array());
    const Json props = s.value("properties", Json::object());
    for (const auto& [k, x] : props.items()) {
      if (std::find(req.begin(), req.end(), Json(k)) != req.end() || rng() % 2)
        o[k] = instance(x, root, rng, depth + 1);
    }
    const Json extra = s.value("additionalProperties", Json(false));
    if (extra != false && rng() % 2) o["zz_extra\u00e9"] = instance(extra, root, rng, depth + 1);
    return o;
  }
  if (t == "array") {
    Json a = Json::array();
    const size_t lo = s.value("minItems", size_t{0}), hi = std::min<size_t>(s.value("maxItems", lo + 3), lo + 3);
    const size_t n = lo + rng() % (hi - lo + 1);
    for (size_t i = 0; i < n; ++i) a.push_back(instance(s.value("items", Json(true)), root, rng, depth + 1));
    return a;
  }
  if (t == "string") {
    const size_t lo = s.value("minLength", size_t{0}), hi = std::min<size_t>(s.value("maxLength", lo + 6), lo + 6);
    std::string str;
    static const char32_t kChars[] = {'a', ' ', '"', '\\', '\n', 0x01, 0xE9, 0x4E2D, 0x1F600, '/'};
    const size_t n = lo + rng() % (hi - lo + 1);
    for (size_t i = 0; i < n; ++i) utf8::append_codepoint(kChars[rng() % 10], str);
    return str;
  }
  if (t == "integer") {
    const int64_t lo = s.contains("minimum") ? s["minimum"].get<int64_t>() : -1000;
    const int64_t hi = s.contains("maximum") ? s["maximum"].get<int64_t>() : 1000;
    return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
  }
  if (t == "number") {
    const double lo = s.value("minimum", -50.0), hi = s.value("maximum", 50.0);
    return std::min(hi, lo + static_cast<double>(rng() % static_cast<uint64_t>((hi - lo) * 4 + 1)) / 4);
  }
  if (t == "boolean") return rng() % 2 == 0;
  return nullptr;
}

// A random schema of the supported subset.
Json random_schema(std::mt19937_64& rng, int depth) {
  const int kind = static_cast<int>(rng() % (depth > 2 ? 6 : 9));
  switch (kind) {
    case 0: {
      Json s = {{"type", "string"}};
      const uint64_t lo = rng() % 3 == 0 ? rng() % 2 : 0;
      if (lo) s["minLength"] = lo;
      if (rng() % 2) s["maxLength"] = lo + rng() % 5;
      return s;
    }
    case 1: {
      Json s = {{"type", "integer"}};
      if (rng() % 2) s["minimum"] = static_cast<int64_t>(rng() % 200) - 100;
      if (rng() % 2) s["maximum"] = s.value("minimum", int64_t{-50}) + static_cast<int64_t>(rng() % 300);
      return s;
    }
    case 2: {
      Json s = {{"type", "number"}};
      if (rng() % 2) s["minimum"] = static_cast<int64_t>(rng() % 20) - 10;
      if (rng() % 2) s["maximum"] = s.value("minimum", int64_t{-5}) + static_cast<int64_t>(rng() % 30);
      return s;
    }
    case 3:
      return {{"type", rng() % 2 ? "boolean" : "null"}};
    case 4:
      return {{"enum", {"red", 3, nullptr, Json::array({1, "x"})}}};
    case 5:
      return {{"const", {{"k", "v\"q"}}}};
    case 6: {
      Json s = {{"type", "object"}, {"properties", Json::object()}, {"required", Json::array()}};
      const int n = 1 + static_cast<int>(rng() % 4);
      for (int i = 0; i < n; ++i) {
        std::string k = "a";
        k[0] = static_cast<char>('a' + i);
        if (i % 2) k.append("\u00e9");
        s["properties"][k] = random_schema(rng, depth + 1);
        if (rng() % 2) s["required"].push_back(k);
      }
      const int extra = static_cast<int>(rng() % 4);
      if (extra == 1) s["additionalProperties"] = true;
      if (extra == 2) s["additionalProperties"] = {{"type", "integer"}};
      return s;
    }
    case 7: {
      Json s = {{"type", "array"}, {"items", random_schema(rng, depth + 1)}};
      if (rng() % 2) s["minItems"] = rng() % 2;
      if (rng() % 2) s["maxItems"] = 2 + rng() % 3;
      return s;
    }
    default:
      return {{"anyOf", {random_schema(rng, depth + 1), random_schema(rng, depth + 1)}}};
  }
}

// The three checks on one schema: instances accepted, walks valid, accepted edits valid.
void check_schema(const Json& schema, std::mt19937_64& rng, bool instances = true) {
  const auto vocab = testing::synthetic_vocab();
  const auto g = compile(json_schema_grammar(schema), vocab);
  std::vector<std::string> docs;
  for (int i = 0; instances && i < 40; ++i) {
    std::string text;
    write(instance(schema, schema, rng), text, rng);
    ASSERT_TRUE(valid(schema, schema, Json::parse(text))) << "generator: " << text;
    ASSERT_TRUE(accepts(*g, text)) << schema.dump() << "\nrefused: " << text;
    docs.push_back(text);
  }
  for (int i = 0; i < 30; ++i) {
    const auto w = testing::random_walk(g, *vocab, rng, 300);
    if (!w.ended) continue;
    const Json parsed = Json::parse(w.text, nullptr, false);
    ASSERT_FALSE(parsed.is_discarded()) << schema.dump() << "\nwalk: " << w.text;
    ASSERT_TRUE(valid(schema, schema, parsed)) << schema.dump() << "\nwalk: " << w.text;
    docs.push_back(w.text);
  }
  for (int i = 0; i < 200 && !docs.empty(); ++i) {
    std::string t = docs[rng() % docs.size()];
    const size_t at = rng() % (t.size() + 1);
    static const std::string kBytes = "{}[],:\" 0-1.e\\atnlrufx";
    if (rng() % 2 && at < t.size()) {
      t.erase(at, 1);
    } else {
      t.insert(at, 1, kBytes[rng() % kBytes.size()]);
    }
    if (!accepts(*g, t)) continue;
    const Json parsed = Json::parse(t, nullptr, false);
    ASSERT_FALSE(parsed.is_discarded()) << schema.dump() << "\naccepted: " << t;
    ASSERT_TRUE(valid(schema, schema, parsed)) << schema.dump() << "\naccepted: " << t;
  }
}

TEST(GrammarJsonSchema, ToolLikeSchema) {
  std::mt19937_64 rng(1);
  check_schema(Json::parse(R"({
    "type": "object",
    "properties": {
      "city": {"type": "string", "maxLength": 12},
      "unit": {"enum": ["celsius", "fahrenheit"]},
      "days": {"type": "integer", "minimum": 1, "maximum": 14},
      "hourly": {"type": "boolean"},
      "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 3},
      "at": {"type": "number", "minimum": -90, "maximum": 90}
    },
    "required": ["city", "days"],
    "additionalProperties": false
  })"),
               rng);
}

TEST(GrammarJsonSchema, RefsDefsAndRecursion) {
  std::mt19937_64 rng(2);
  check_schema(Json::parse(R"({
    "$defs": {"leaf": {"type": "integer", "minimum": 0, "maximum": 9},
              "node": {"type": "object", "properties": {"v": {"$ref": "#/$defs/leaf"},
                                                        "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
                       "required": ["v"]}},
    "$ref": "#/$defs/node"
  })"),
               rng);
}

TEST(GrammarJsonSchema, PatternsAndFormatsMatchWholeStrings) {
  std::mt19937_64 rng(3);
  const Json s = Json::parse(R"({"type": "object", "properties": {
      "code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$"},
      "quote": {"type": "string", "pattern": "a\"b\\\\c"},
      "day": {"type": "string", "format": "date"},
      "id": {"type": "string", "format": "uuid"}}, "required": ["code", "quote", "day", "id"]})");
  check_schema(s, rng, /*instances=*/false);
  const auto g = compile(json_schema_grammar(s), testing::synthetic_vocab());
  EXPECT_TRUE(accepts(
      *g,
      R"({"code": "AB-123", "quote": "a\"b\\c", "day": "2024-02-29", "id": "123e4567-e89b-12d3-a456-426614174000"})"));
  EXPECT_FALSE(accepts(
      *g,
      R"({"code": "AB-1234", "quote": "a\"b\\c", "day": "2024-02-29", "id": "123e4567-e89b-12d3-a456-426614174000"})"));
  EXPECT_FALSE(accepts(
      *g,
      R"({"code": "AB-123", "quote": "a\"b\\c", "day": "2024-13-01", "id": "123e4567-e89b-12d3-a456-426614174000"})"));
}

TEST(GrammarJsonSchema, IntegerRangesAreExact) {
  const auto vocab = testing::synthetic_vocab();
  for (const auto& [lo, hi] : std::vector<std::pair<int, int>>{{-37, 1205}, {0, 9}, {10, 99}, {-100, -7}, {5, 5}}) {
    const auto g = compile(json_schema_grammar({{"type", "integer"}, {"minimum", lo}, {"maximum", hi}}), vocab);
    for (int x = lo - 150; x <= hi + 150; ++x) ASSERT_EQ(accepts(*g, std::to_string(x)), x >= lo && x <= hi) << x;
    EXPECT_FALSE(accepts(*g, "-0"));
    EXPECT_FALSE(accepts(*g, "007"));
  }
  const auto open = compile(json_schema_grammar({{"type", "integer"}, {"exclusiveMinimum", 3}}), vocab);
  EXPECT_FALSE(accepts(*open, "3"));
  EXPECT_TRUE(accepts(*open, "4"));
  EXPECT_TRUE(accepts(*open, "40000000000"));
}

TEST(GrammarJsonSchema, WhitespaceIsBounded) {
  const auto g =
      compile(json_schema_grammar({{"type", "array"}, {"items", {{"type", "null"}}}}), testing::synthetic_vocab());
  std::string doc = "[null]";
  doc.insert(1, static_cast<size_t>(kMaxJsonWhitespace), ' ');
  EXPECT_TRUE(accepts(*g, doc));
  doc.insert(1, 1, '\n');
  EXPECT_FALSE(accepts(*g, doc));
  EXPECT_FALSE(accepts(*g, " [null]"));
}

TEST(GrammarJsonSchema, RandomSchemas) {
  std::mt19937_64 rng(20261204);
  for (int i = 0; i < 60; ++i) {
    const Json s = random_schema(rng, 0);
    SCOPED_TRACE(s.dump());
    check_schema(s, rng);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(GrammarJsonSchema, JsonObjectIsAnyObject) {
  std::mt19937_64 rng(4);
  const auto vocab = testing::synthetic_vocab();
  const auto g = compile(json_object_grammar(), vocab);
  EXPECT_TRUE(accepts(*g, R"({"a": [1, {"b": null}, "\u00e9\n"], "c": -0.5e+3})"));
  EXPECT_FALSE(accepts(*g, "[1]"));
  for (int i = 0; i < 40; ++i) {
    const auto w = testing::random_walk(g, *vocab, rng, 300);
    if (w.ended) {
      ASSERT_TRUE(Json::parse(w.text, nullptr, false).is_object()) << Json(w.text).dump();
    }
  }
}

TEST(GrammarJsonSchema, RefusesUnsupportedKeywordsByName) {
  const auto err = [](const char* s) { return dsv4::testing::error_of([&] { json_schema_grammar(Json::parse(s)); }); };
  EXPECT_NE(
      err(R"({"type": "object", "properties": {"a": {"not": {"type": "null"}}}})").find("'not' at #/properties/a"),
      std::string::npos);
  EXPECT_NE(err(R"({"type": "array", "uniqueItems": true})").find("uniqueItems"), std::string::npos);
  EXPECT_NE(err(R"({"type": "number", "multipleOf": 2})").find("multipleOf"), std::string::npos);
  EXPECT_NE(err(R"({"type": "string", "format": "hostname"})").find("format \"hostname\""), std::string::npos);
  EXPECT_NE(err(R"({"$ref": "http://x/y.json"})").find("remote '$ref'"), std::string::npos);
  EXPECT_NE(err(R"({"type": "string", "pattern": "(a)\\1"})").find("backreference"), std::string::npos);
  EXPECT_NE(err(R"({"type": "object", "patternProperties": {}})").find("patternProperties"), std::string::npos);
  EXPECT_NE(err(R"({"$ref": "#/$defs/missing"})").find("points to nothing"), std::string::npos);
}

}  // namespace
}  // namespace dsv4::grammar
