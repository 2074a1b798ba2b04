// The OpenAI error envelope and how faults map to HTTP statuses. Handlers throw ApiError; the server
// renders it as {"error": {"message", "type", "param", "code"}} with its status, or as an SSE error event
// once a stream has started (vLLM's convention).
//
// Types follow OpenAI and llama.cpp: invalid_request_error (400, 405, 413), authentication_error (401),
// not_found_error (404), unavailable_error (503), server_error (500). `code` is OpenAI's string code when
// one fits ("context_length_exceeded", "model_not_found", ...), otherwise the HTTP status (vLLM's).
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace dsv4::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string type, const std::string& message, std::string param = {}, std::string code = {})
      : std::runtime_error(message),
        status_(status),
        type_(std::move(type)),
        param_(std::move(param)),
        code_(std::move(code)) {}

  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }

 private:
  int status_;
  std::string type_, param_, code_;
};

// The envelope as JSON text.
std::string error_body(const ApiError& e);
std::string error_body(int status, std::string_view type, std::string_view message);

// 400 invalid_request_error naming the field.
[[noreturn]] void throw_bad_request(std::string param, const std::string& message);
template <typename... Args>
[[noreturn]] void bad_request(std::string param, fmt::format_string<Args...> f, Args&&... args) {
  throw_bad_request(std::move(param), fmt::format(f, std::forward<Args>(args)...));
}

// 400 for a field the server understands but does not implement yet ("... is not supported").
[[noreturn]] void not_supported(std::string param, std::string_view what);

ApiError unauthorized();
ApiError model_not_found(const std::string& model);
ApiError route_not_found(const std::string& method, const std::string& path);
// 405 for a known path asked with another method; `allowed` lists the methods it takes (the Allow header).
ApiError method_not_allowed(const std::string& method, const std::string& path, const std::string& allowed);
ApiError payload_too_large(size_t limit);
ApiError unavailable(const std::string& message, std::string code = {});
ApiError internal_error(const std::string& message);
// vLLM's and OpenAI's wording, which client libraries match on.
ApiError context_length_exceeded(int64_t max_model_len, int64_t prompt_tokens, int64_t max_tokens);

}  // namespace dsv4::server
