// cpp-httplib's router and response writer, fed whole requests by the RequestReader instead of reading
// sockets itself: cpp-httplib 0.11.4 reads each connection on a thread of its own, which a client sending
// half a request holds for the read timeout. serve() runs cpp-httplib's own request processing (routing,
// handlers, error and exception handlers, response and SSE writing) over a stream of one request.
#pragma once

#include <httplib.h>


namespace dsv4::server {

class RoutedServer : public httplib::Server {
 public:
  // Answers the request `stream` holds. `last`: announce "Connection: close". Returns whether the
  // connection may carry another request (no write failed, neither side asked to close).
  bool serve(httplib::Stream& stream, bool last);

  // While stopped, streaming responses end before their next chunk (cpp-httplib's shutdown check).
  void set_running(bool running);
};

}  // namespace dsv4::server
