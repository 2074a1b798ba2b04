// The server's front end: one thread that accepts connections and reads requests off all of them with
// epoll, so that no request thread is ever held by a client that has not sent a whole request (a thousand
// half-open sockets cost a thousand descriptors and buffers, not a thousand threads).
//
// For each connection it reads the request line, headers and body (RequestFramer: the body limit is
// enforced while the body arrives, before anything parses it), answers "Expect: 100-continue", and hands
// the complete request to `dispatch` (a request thread answers it through a ConnectionStream, then gives
// the connection back with release()). Timeouts, from ServerConfig:
//   keep_alive_timeout  a connection that has not started a request (new, or between requests) is closed,
//                       unless its next request's first bytes are already waiting;
//   header_timeout      the request line and headers must be complete this long after their first byte
//                       (however slowly they trickle in);
//   body_timeout        a body that sends nothing for this long is dropped.
// Request bytes held at once over all connections are bounded too (max_buffered_bytes): a body whose bytes
// would pass it gets 503 (with Retry-After), so many slow uploads cannot take the memory the engine needs;
// requests without a body (/health) are never refused for it.
// A request that breaks a limit or the framing gets its error (JSON envelope) and "Connection: close"; the
// reader then stops sending, drops what the client still sends for a moment (so the client reads the
// answer instead of a reset), and closes. While a request is handled the reader watches its connection for
// the peer leaving and marks the request's PeerWatch at once (connection_probe.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "server/connection.h"

namespace dsv4::server {

struct ReaderOptions {
  size_t max_body_bytes = size_t{64} << 20;
  size_t max_buffered_bytes = size_t{1} << 30;  // over all connections; a body read past it gets 503
  double keep_alive_timeout = 65;
  double header_timeout = 20;
  double body_timeout = 60;
};

class RequestReader {
 public:
  // Takes a complete request; false when it cannot (shutting down): the reader closes the connection.
  using Dispatch = std::function<bool(std::shared_ptr<Connection>)>;

  // Takes ownership of `listen_fd`, a listening socket.
  RequestReader(int listen_fd, ReaderOptions options, Dispatch dispatch);
  ~RequestReader();
  RequestReader(const RequestReader&) = delete;
  RequestReader& operator=(const RequestReader&) = delete;

  void start();
  // From the request thread, once its request is answered: `keep_alive` reads the connection's next
  // request, otherwise it is closed.
  void release(std::shared_ptr<Connection> c, bool keep_alive);
  // Accepts no more connections (the listening socket is closed when this returns).
  void close_listener();
  // Closes every connection not being handled and stops the thread; connections released later are closed.
  void stop();

  size_t connections() const { return num_connections_.load(); }

 private:
  using Clock = Connection::Clock;

  void wake();  // any thread: the loop takes the commands now
  void loop();
  bool take_commands();
  void accept_all();
  void on_event(uint64_t id, uint32_t events);
  void read_some(Connection& c);
  void discard_some(Connection& c);
  void advance(const std::shared_ptr<Connection>& c);
  void dispatch_request(const std::shared_ptr<Connection>& c);
  void take_back(const std::shared_ptr<Connection>& c, bool keep_alive);
  void refuse(Connection& c, const ApiError& e);
  void sweep();
  void close_or_read_idle(const std::shared_ptr<Connection>& c);
  void watch(const Connection& c, uint32_t events, int op);
  void close(uint64_t id);
  void close_listener_now();

  const ReaderOptions options_;
  const Dispatch dispatch_;
  int listen_fd_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: release(), close_listener() and stop() wake the loop
  std::thread thread_;

  // Loop thread only.
  std::unordered_map<uint64_t, std::shared_ptr<Connection>> conns_;
  std::vector<char> scratch_ = std::vector<char>(64 << 10);  // one read
  size_t buffered_ = 0;                                      // bytes in the connections' buffers
  uint64_t next_id_ = 2;  // 0 and 1 name the listener and the wake-up descriptor in epoll
  Clock::time_point accept_paused_until_{};
  bool accept_failing_ = false;
  Clock::time_point last_sweep_{};

  // Shared with other threads (under mu_).
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::shared_ptr<Connection>, bool>> released_;
  bool close_listener_ = false;
  bool listener_closed_ = false;
  bool stopping_ = false;
  bool stopped_ = false;
  std::atomic<size_t> num_connections_{0};
};

}  // namespace dsv4::server
