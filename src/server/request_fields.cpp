#include "server/request_fields.h"

#include <cmath>
#include <limits>

#include "server/api_error.h"

namespace dsv4::server {

Json parse_request_body(std::string_view body) {
  // Parsing is iterative, but later walks over the value (the encoder, error excerpts) recurse: a
  // maliciously deep body must not reach them.
  bool too_deep = false;
  const Json::parser_callback_t depth_check = [&too_deep](int depth, Json::parse_event_t, Json&) {
    too_deep = too_deep || depth > kMaxJsonDepth;
    return true;
  };
  Json j = Json::parse(body.begin(), body.end(), depth_check, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    bad_request("", "The request body is not valid JSON{}", body.empty() ? " (it is empty)" : "");
  }
  if (too_deep) bad_request("", "The request body nests deeper than {} levels", kMaxJsonDepth);
  if (!j.is_object()) bad_request("", "The request body must be a JSON object, got {}", json_excerpt(j));
  return j;
}

std::string json_excerpt(const Json& v) {
  std::string s = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  constexpr size_t kMax = 60;
  if (s.size() > kMax) s = s.substr(0, kMax) + "...";
  return s;
}

RequestFields::RequestFields(const Json& object, std::string prefix) : object_(object), prefix_(std::move(prefix)) {}

const Json* RequestFields::get(std::string_view key) const {
  const auto it = object_.find(key);
  if (it == object_.end() || it->is_null()) return nullptr;
  return &*it;
}

bool RequestFields::has(std::string_view key) const { return get(key) != nullptr; }

void RequestFields::wrong_type(std::string_view key, std::string_view expected, const Json& got) const {
  bad_request(name(key), "'{}' must be {}, got {}", name(key), expected, json_excerpt(got));
}

std::optional<bool> RequestFields::boolean(std::string_view key) const {
  const Json* v = get(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) wrong_type(key, "a boolean", *v);
  return v->get<bool>();
}

std::optional<double> RequestFields::number(std::string_view key) const {
  const Json* v = get(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) wrong_type(key, "a number", *v);
  return v->get<double>();
}

std::optional<int64_t> RequestFields::integer(std::string_view key) const {
  const Json* v = get(key);
  if (v == nullptr) return std::nullopt;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      wrong_type(key, "an integer of at most 63 bits", *v);
    }
    return v->get<int64_t>();
  }
  if (v->is_number_float()) {
    const double d = v->get<double>();
    // Integral floats within +-2^53 are exact (pydantic's lax mode accepts them).
    if (std::isfinite(d) && std::trunc(d) == d && std::fabs(d) <= 9007199254740992.0) return static_cast<int64_t>(d);
  }
  wrong_type(key, "an integer", *v);
}

std::optional<std::string> RequestFields::string(std::string_view key) const {
  const Json* v = get(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) wrong_type(key, "a string", *v);
  return v->get<std::string>();
}

const Json* RequestFields::object(std::string_view key) const {
  const Json* v = get(key);
  if (v != nullptr && !v->is_object()) wrong_type(key, "an object", *v);
  return v;
}

const Json* RequestFields::array(std::string_view key) const {
  const Json* v = get(key);
  if (v != nullptr && !v->is_array()) wrong_type(key, "an array", *v);
  return v;
}

std::optional<double> RequestFields::number_in(std::string_view key, double lo, double hi) const {
  const auto v = number(key);
  if (v && !(*v >= lo && *v <= hi)) bad_request(name(key), "'{}' must be in [{}, {}], got {}", name(key), lo, hi, *v);
  return v;
}

std::optional<int64_t> RequestFields::integer_in(std::string_view key, int64_t lo, int64_t hi) const {
  const auto v = integer(key);
  if (v && (*v < lo || *v > hi)) bad_request(name(key), "'{}' must be in [{}, {}], got {}", name(key), lo, hi, *v);
  return v;
}

}  // namespace dsv4::server
