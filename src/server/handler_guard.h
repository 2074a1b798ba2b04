// Every handler runs inside guard(): an ApiError becomes its envelope and status; a dsv4::Error (thrown by
// the encoder, tokenizer or engine on bad input) a 400; anything else a 500. cpp-httplib's own errors (no
// route, payload too large) get the same envelope through the error handler.
#pragma once

#include <httplib.h>

#include <functional>

#include "server/api_error.h"

namespace dsv4::server {

void send_error(httplib::Response& res, const ApiError& e);

using GuardedHandler = std::function<void(const httplib::Request&, httplib::Response&)>;
// `on_error` runs for every error answered (counts rejected generation requests).
httplib::Server::Handler guard(GuardedHandler handler, std::function<void(const ApiError&)> on_error = nullptr);

}  // namespace dsv4::server
