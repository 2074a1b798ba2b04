#include "server/handler_guard.h"

#include <spdlog/spdlog.h>

#include "core/error.h"

namespace dsv4::server {

namespace {

// Every 503 is a moment's overload or a server on its way up or down: clients (the openai package honours
// the header) retry after this many seconds, and a load balancer moves on to another replica.
constexpr const char* kRetryAfterSeconds = "1";

}  // namespace

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status();
  if (e.status() == 503) res.set_header("Retry-After", kRetryAfterSeconds);
  res.set_content(error_body(e), "application/json");
}

httplib::Server::Handler guard(GuardedHandler handler, std::function<void(const ApiError&)> on_error) {
  return [handler = std::move(handler), on_error = std::move(on_error)](const httplib::Request& req,
                                                                        httplib::Response& res) {
    const auto answer = [&](const ApiError& e) {
      if (e.status() == 503) {
        spdlog::info("http: {} {}: 503 {}", req.method, req.path, e.what());  // load shedding: expected
      } else if (e.status() >= 500) {
        spdlog::warn("http: {} {}: {} {}", req.method, req.path, e.status(), e.what());
      }
      if (on_error) on_error(e);
      send_error(res, e);
    };
    try {
      handler(req, res);
    } catch (const ApiError& e) {
      answer(e);
    } catch (const Error& e) {
      answer(ApiError(400, "invalid_request_error", e.what()));
    } catch (const std::exception& e) {
      answer(internal_error(e.what()));
    }
  };
}

}  // namespace dsv4::server
