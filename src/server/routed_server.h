// cpp-httplib's router and response writer, fed whole requests by the RequestReader instead of reading
// sockets itself: cpp-httplib 0.11.4 reads each connection on a thread of its own, which a client sending
// half a request holds for the read timeout. serve() runs cpp-httplib's own request processing (routing,
// handlers, error and exception handlers, response and SSE writing) over a stream of one request.
//
// It also remembers the methods each route takes, so that a known path asked with another method is
// answered 405 with an Allow header (vLLM's) rather than 404. Routes are added with Get and Post, which
// hide cpp-httplib's.
#pragma once

#include <httplib.h>

#include <regex>
#include <string>
#include <vector>

namespace dsv4::server {

class RoutedServer : public httplib::Server {
 public:
  RoutedServer& Get(const std::string& pattern, Handler handler);
  RoutedServer& Post(const std::string& pattern, Handler handler);

  // The methods some route takes for `path` ("GET, HEAD", "POST"); empty when no route matches it.
  std::string allowed_methods(const std::string& path) const;

  // Answers the request `stream` holds. `last`: announce "Connection: close". Returns whether the
  // connection may carry another request (no write failed, neither side asked to close).
  bool serve(httplib::Stream& stream, bool last);

  // While stopped, streaming responses end before their next chunk (cpp-httplib's shutdown check).
  void set_running(bool running);

 private:
  struct Route {
    std::regex pattern;
    const char* methods;
  };
  std::vector<Route> routes_;
};

}  // namespace dsv4::server
