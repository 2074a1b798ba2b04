// The cpp-httplib Stream a request thread answers one request through: reads come from the request's bytes,
// which the RequestReader has already received whole (so parsing never waits on the client, and ends at
// the request's last byte, leaving a pipelined next request alone); writes go to the socket, waiting for
// room up to the write timeout, so a client that stops reading is dropped rather than holding the thread.
#pragma once

#include <httplib.h>

#include <chrono>

#include "server/connection.h"

namespace dsv4::server {

class ConnectionStream final : public httplib::Stream {
 public:
  ConnectionStream(const Connection& c, std::chrono::milliseconds write_timeout)
      : c_(c), request_(c.request()), write_timeout_(write_timeout) {}

  bool is_readable() const override { return read_ < request_.size(); }
  // Room to write within the write timeout, and the client still there.
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  // Writes some of [ptr, ptr + size): the count, or -1 when the client left or did not read for the timeout.
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  socket_t socket() const override { return c_.fd(); }

 private:
  bool wait_writable(std::chrono::steady_clock::time_point deadline) const;

  const Connection& c_;
  std::string_view request_;
  size_t read_ = 0;
  std::chrono::milliseconds write_timeout_;
};

}  // namespace dsv4::server
