#include "server/connection_stream.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace dsv4::server {

using Clock = std::chrono::steady_clock;

bool ConnectionStream::wait_writable(Clock::time_point deadline) const {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0 || c_.watch()->closed()) return false;
    pollfd p{c_.fd(), POLLOUT, 0};
    // Wake now and then to notice a peer that left while its socket buffer stays full.
    const int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 100)));
    if (r > 0) return (p.revents & (POLLERR | POLLHUP)) == 0;
    if (r < 0 && errno != EINTR) return false;
  }
}

bool ConnectionStream::is_writable() const { return wait_writable(Clock::now() + write_timeout_); }

ssize_t ConnectionStream::read(char* ptr, size_t size) {
  const size_t n = std::min(size, request_.size() - read_);
  std::memcpy(ptr, request_.data() + read_, n);
  read_ += n;
  return static_cast<ssize_t>(n);
}

ssize_t ConnectionStream::write(const char* ptr, size_t size) {
  const auto deadline = Clock::now() + write_timeout_;
  for (;;) {
    const ssize_t n = ::send(c_.fd(), ptr, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return n;
    if (errno == EINTR) continue;
    if ((errno != EAGAIN && errno != EWOULDBLOCK) || !wait_writable(deadline)) return -1;
  }
}

void ConnectionStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  ip = c_.remote_addr();
  port = c_.remote_port();
}

void ConnectionStream::get_local_ip_and_port(std::string& ip, int& port) const {
  ip = c_.local_addr();
  port = c_.local_port();
}

}  // namespace dsv4::server
