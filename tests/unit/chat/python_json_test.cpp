// python_json_dumps against outputs of Python 3.11's json.dumps(..., ensure_ascii=False).
#include "chat/python_json.h"

#include <gtest/gtest.h>

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "core/error.h"

namespace dsv4::chat {
namespace {

using ordered_json = nlohmann::ordered_json;

TEST(PythonJson, FloatsMatchPythonRepr) {
  const std::pair<double, const char*> cases[] = {
      {0.0, "0.0"},
      {-0.0, "-0.0"},
      {1.0, "1.0"},
      {-1.5, "-1.5"},
      {0.1, "0.1"},
      {0.1 + 0.2, "0.30000000000000004"},
      {1e16, "1e+16"},
      {1e15, "1000000000000000.0"},
      {9999999999999998.0, "9999999999999998.0"},
      {1234567890123456.0, "1234567890123456.0"},
      {12345678901234567.0, "1.2345678901234568e+16"},
      {1e-4, "0.0001"},
      {1e-5, "1e-05"},
      {0.00012345, "0.00012345"},
      {1.5e-7, "1.5e-07"},
      {5e-324, "5e-324"},
      {1.7976931348623157e308, "1.7976931348623157e+308"},
      {1e22, "1e+22"},
      {2.5e-310, "2.5e-310"},
      {100.0, "100.0"},
      {123.456, "123.456"},
      {-9223372036854775808.0, "-9.223372036854776e+18"},
      {3.141592653589793, "3.141592653589793"},
      {9007199254740992.0, "9007199254740992.0"},
      {1e100, "1e+100"},
      {6.02214076e23, "6.02214076e+23"},
      {std::numeric_limits<double>::quiet_NaN(), "NaN"},
      {std::numeric_limits<double>::infinity(), "Infinity"},
      {-std::numeric_limits<double>::infinity(), "-Infinity"},
  };
  for (const auto& [x, want] : cases) EXPECT_EQ(python_float_repr(x), want) << want;
}

// Random doubles: the text reads back as the same double, is no longer than the shortest
// round-trip form, and follows repr's fixed/exponent rule.
TEST(PythonJson, RandomFloatsRoundTrip) {
  std::mt19937_64 rng(20260501);
  std::uniform_int_distribution<uint64_t> bits;
  for (int i = 0; i < 20000; ++i) {
    const uint64_t b = bits(rng);
    double x;
    std::memcpy(&x, &b, sizeof x);
    if (!std::isfinite(x)) continue;
    const std::string s = python_float_repr(x);
    double back = 0;
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), back);
    ASSERT_EQ(ec, std::errc()) << s;
    ASSERT_EQ(ptr, s.data() + s.size()) << s;
    ASSERT_EQ(std::memcmp(&back, &x, sizeof x), 0) << s;
    const double a = std::fabs(x);
    const bool exponent = a != 0 && (a < 1e-4 || a >= 1e16);
    ASSERT_EQ(s.find('e') != std::string::npos, exponent) << s;
    if (!exponent) {
      ASSERT_NE(s.find('.'), std::string::npos) << s;
    }
  }
}

TEST(PythonJson, SeparatorsOrderAndEscapes) {
  ordered_json v = ordered_json::parse(R"({"b": [1, 2.5, 1e20, 0.1, null, true, false], "a": {}, "c": []})");
  EXPECT_EQ(python_json_dumps(v), R"({"b": [1, 2.5, 1e+20, 0.1, null, true, false], "a": {}, "c": []})");
  const std::string s = std::string("x\"\\/\n\r\t\b\f") + '\0' + "\x1f\x7f é中😀\u2028";
  EXPECT_EQ(python_json_dumps(ordered_json(s)), "\"x\\\"\\\\/\\n\\r\\t\\b\\f\\u0000\\u001f\x7f é中😀\u2028\"");
  EXPECT_EQ(python_json_quote("a\x01"), "\"a\\u0001\"");
}

TEST(PythonJson, Integers) {
  EXPECT_EQ(python_json_dumps(ordered_json(-9223372036854775807LL - 1)), "-9223372036854775808");
  EXPECT_EQ(python_json_dumps(ordered_json(18446744073709551615ULL)), "18446744073709551615");
  EXPECT_EQ(python_json_dumps(ordered_json::parse("[0, -0, 10]")), "[0, 0, 10]");
}

TEST(PythonJson, BinaryIsAnError) {
  ordered_json v = ordered_json::binary({1, 2});
  try {
    python_json_dumps(v);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "python_json_dumps: a binary value has no JSON text");
  }
}

}  // namespace
}  // namespace dsv4::chat
