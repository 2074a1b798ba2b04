#include "server/routed_server.h"

namespace dsv4::server {

RoutedServer& RoutedServer::Get(const std::string& pattern, Handler handler) {
  routes_.push_back({std::regex(pattern), "GET, HEAD"});  // cpp-httplib answers HEAD with the GET handler
  httplib::Server::Get(pattern, std::move(handler));
  return *this;
}

RoutedServer& RoutedServer::Post(const std::string& pattern, Handler handler) {
  routes_.push_back({std::regex(pattern), "POST"});
  httplib::Server::Post(pattern, std::move(handler));
  return *this;
}

std::string RoutedServer::allowed_methods(const std::string& path) const {
  std::string allowed;
  for (const Route& r : routes_) {
    if (!std::regex_match(path, r.pattern) || allowed.find(r.methods) != std::string::npos) continue;
    allowed += allowed.empty() ? r.methods : std::string(", ") + r.methods;
  }
  return allowed;
}

bool RoutedServer::serve(httplib::Stream& stream, bool last) {
  bool client_closes = false;
  // The reader has answered "Expect: 100-continue" already, before reading the body.
  const auto forget_expect = [](httplib::Request& req) { req.headers.erase("Expect"); };
  const bool written = process_request(stream, last, client_closes, forget_expect);
  return written && !client_closes && !last;
}

void RoutedServer::set_running(bool running) {
  // cpp-httplib takes an invalid listening socket for "shutting down"; this server never listens itself,
  // so any valid descriptor number says "running".
  svr_sock_ = running ? 0 : INVALID_SOCKET;
}

}  // namespace dsv4::server
