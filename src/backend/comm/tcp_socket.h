// TcpSocket: a blocking TCP socket whose every wait ends at a deadline, for the rendezvous (the only
// network code of the engine besides the HTTP server's library).
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>

namespace dsv4 {

using Deadline = std::chrono::steady_clock::time_point;

class TcpSocket {
 public:
  TcpSocket() = default;
  explicit TcpSocket(int fd) : fd_(fd) {}
  ~TcpSocket();
  TcpSocket(TcpSocket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  TcpSocket& operator=(TcpSocket&& o) noexcept;
  TcpSocket(const TcpSocket&) = delete;
  TcpSocket& operator=(const TcpSocket&) = delete;

  bool is_open() const { return fd_ >= 0; }

  // Listens on `port` of every interface.
  static TcpSocket listen(int port);
  // Connects to host:port, retrying refused connections until the deadline (nullopt then).
  static std::optional<TcpSocket> connect(const std::string& host, int port, Deadline deadline);
  // The next connection, or nullopt at the deadline.
  std::optional<TcpSocket> accept(Deadline deadline) const;

  // False when the peer closed the connection or the deadline passed before all bytes moved.
  bool send_all(const void* data, size_t bytes, Deadline deadline) const;
  bool recv_all(void* data, size_t bytes, Deadline deadline) const;

 private:
  int fd_ = -1;
};

}  // namespace dsv4
