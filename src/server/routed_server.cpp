#include "server/routed_server.h"

namespace dsv4::server {

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
