// The client side of SSE, for `dsv4 bench serve` and the tests: a parser that turns received bytes into
// events (the `data:` payloads; comments such as pings are reported apart), and a POST that streams them.
#pragma once

#include <httplib.h>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace dsv4::bench {

class SseParser {
 public:
  struct Event {
    std::string data;      // the data lines joined by "\n" (empty for a comment)
    bool comment = false;  // a ": ..." line (keep-alive)
  };
  // Bytes in any split; returns the events completed by them.
  std::vector<Event> feed(std::string_view bytes);

 private:
  std::string buf_, data_;
  bool has_data_ = false;
};

struct StreamResult {
  int status = 0;     // 0 when the connection failed
  std::string body;   // the body of a non-2xx answer (the error envelope)
  std::string error;  // transport error, if any
};

// POSTs `body` and calls on_event for each event of a 2xx answer; returning false from it closes the
// connection (as a client that gives up).
StreamResult post_stream(httplib::Client& client, const std::string& path, const std::string& body,
                         const httplib::Headers& headers, const std::function<bool(const SseParser::Event&)>& on_event);

}  // namespace dsv4::bench
