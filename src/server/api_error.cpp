#include "server/api_error.h"

#include <nlohmann/json.hpp>

namespace dsv4::server {

std::string error_body(const ApiError& e) {
  nlohmann::ordered_json err = {{"message", e.what()}, {"type", e.type()}};
  err["param"] = e.param().empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(e.param());
  err["code"] = e.code().empty() ? nlohmann::ordered_json(e.status()) : nlohmann::ordered_json(e.code());
  return nlohmann::ordered_json{{"error", err}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string error_body(int status, std::string_view type, std::string_view message) {
  return error_body(ApiError(status, std::string(type), std::string(message)));
}

void throw_bad_request(std::string param, const std::string& message) {
  throw ApiError(400, "invalid_request_error", message, std::move(param));
}

void not_supported(std::string param, std::string_view what) {
  throw ApiError(400, "invalid_request_error", fmt::format("{} is not supported", what), std::move(param),
                 "not_supported");
}

ApiError unauthorized() {
  return ApiError(401, "authentication_error",
                  "Invalid or missing API key: send \"Authorization: Bearer <key>\" (or \"x-api-key: <key>\")", {},
                  "invalid_api_key");
}

ApiError model_not_found(const std::string& model) {
  return ApiError(404, "not_found_error", fmt::format("The model `{}` does not exist.", model), "model",
                  "model_not_found");
}

ApiError route_not_found(const std::string& method, const std::string& path) {
  return ApiError(404, "not_found_error", fmt::format("{} {} is not an endpoint of this server", method, path));
}

ApiError method_not_allowed(const std::string& method, const std::string& path, const std::string& allowed) {
  return ApiError(405, "invalid_request_error",
                  fmt::format("Method {} is not allowed for {}: it takes {}", method, path, allowed), {},
                  "method_not_allowed");
}

ApiError payload_too_large(size_t limit) {
  return ApiError(
      413, "invalid_request_error",
      fmt::format("The request body is larger than the server's limit of {} bytes (--max-request-bytes)", limit), {},
      "payload_too_large");
}

ApiError unavailable(const std::string& message, std::string code) {
  return ApiError(503, "unavailable_error", message, {}, std::move(code));
}

ApiError internal_error(const std::string& message) { return ApiError(500, "server_error", message); }

ApiError context_length_exceeded(int64_t max_model_len, int64_t prompt_tokens, int64_t max_tokens) {
  return ApiError(400, "invalid_request_error",
                  fmt::format("This model's maximum context length is {} tokens. However, you requested {} tokens "
                              "({} in the messages, {} in the completion). Please reduce the length of the messages "
                              "or completion.",
                              max_model_len, prompt_tokens + max_tokens, prompt_tokens, max_tokens),
                  "messages", "context_length_exceeded");
}

}  // namespace dsv4::server
