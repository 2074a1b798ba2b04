// Typed access to the fields of a JSON request object. An absent or null field reads as nullopt (OpenAI
// clients send null for "not set"); a field of the wrong type throws a 400 ApiError naming it, e.g.
// `'temperature' must be a number, got "hot"`. Integers may be written as integral floats (5.0), as
// pydantic accepts them.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace dsv4::server {

using Json = nlohmann::ordered_json;

inline constexpr int kMaxJsonDepth = 64;

// Parses a request body; throws 400 for malformed JSON, nesting deeper than kMaxJsonDepth, and a body that is
// not an object.
Json parse_request_body(std::string_view body);

class RequestFields {
 public:
  // `prefix` names the object in errors ("stream_options." for a nested one).
  explicit RequestFields(const Json& object, std::string prefix = {});

  bool has(std::string_view key) const;         // present and not null
  const Json* get(std::string_view key) const;  // nullptr when absent or null

  std::optional<bool> boolean(std::string_view key) const;
  std::optional<double> number(std::string_view key) const;
  std::optional<int64_t> integer(std::string_view key) const;
  std::optional<std::string> string(std::string_view key) const;
  const Json* object(std::string_view key) const;
  const Json* array(std::string_view key) const;

  // `number` within [lo, hi].
  std::optional<double> number_in(std::string_view key, double lo, double hi) const;
  // `integer` within [lo, hi].
  std::optional<int64_t> integer_in(std::string_view key, int64_t lo, int64_t hi) const;

  std::string name(std::string_view key) const { return prefix_ + std::string(key); }

 private:
  [[noreturn]] void wrong_type(std::string_view key, std::string_view expected, const Json& got) const;

  const Json& object_;
  std::string prefix_;
};

// A short rendering of a JSON value for error messages (at most ~60 characters).
std::string json_excerpt(const Json& v);

}  // namespace dsv4::server
