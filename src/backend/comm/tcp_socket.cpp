#include "backend/comm/tcp_socket.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "core/error.h"

namespace dsv4 {

namespace {

// Milliseconds left until the deadline (0 once passed).
int ms_left(Deadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, 1 << 30));
}

// Waits for `events` on fd until the deadline; false when it passed first.
bool wait_for(int fd, short events, Deadline deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, ms_left(deadline));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) fail("poll: {}", std::strerror(errno));
  }
}

// One non-blocking connection attempt to `a`, finished by the deadline; the connected fd or -1.
int try_connect(const addrinfo& a, Deadline deadline) {
  const int fd = ::socket(a.ai_family, a.ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a.ai_protocol);
  if (fd < 0) return -1;
  int err = ::connect(fd, a.ai_addr, a.ai_addrlen) == 0 ? 0 : errno;
  if (err == EINPROGRESS && wait_for(fd, POLLOUT, deadline)) {
    socklen_t len = sizeof(err);
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  }
  if (err != 0) {
    ::close(fd);
    return -1;
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

}  // namespace

TcpSocket::~TcpSocket() {
  if (fd_ >= 0) ::close(fd_);
}

TcpSocket& TcpSocket::operator=(TcpSocket&& o) noexcept {
  std::swap(fd_, o.fd_);
  return *this;
}

namespace {

// A socket bound to `port` of every interface: IPv6 and IPv4 together where the kernel has IPv6.
int bind_any(int port) {
  const int one = 1, zero = 0;
  int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(static_cast<uint16_t>(port));
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof(a)) == 0) return fd;
    ::close(fd);
  }
  fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  DSV4_CHECK(fd >= 0, "socket: {}", std::strerror(errno));
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof(a)) != 0) {
    const int err = errno;
    ::close(fd);
    fail("cannot listen on port {}: {}", port, std::strerror(err));
  }
  return fd;
}

}  // namespace

TcpSocket TcpSocket::listen(int port) {
  TcpSocket s(bind_any(port));
  DSV4_CHECK(::listen(s.fd_, 128) == 0, "cannot listen on port {}: {}", port, std::strerror(errno));
  return s;
}

std::optional<TcpSocket> TcpSocket::connect(const std::string& host, int port, Deadline deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  do {
    addrinfo* found = nullptr;
    if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) == 0) {
      int fd = -1;
      for (const addrinfo* a = found; a && fd < 0; a = a->ai_next) fd = try_connect(*a, deadline);
      ::freeaddrinfo(found);
      if (fd >= 0) return TcpSocket(fd);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(50, ms_left(deadline))));
  } while (ms_left(deadline) > 0);
  return std::nullopt;
}

std::optional<TcpSocket> TcpSocket::accept(Deadline deadline) const {
  while (wait_for(fd_, POLLIN, deadline)) {
    const int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) return TcpSocket(fd);
  }
  return std::nullopt;
}

bool TcpSocket::send_all(const void* data, size_t bytes, Deadline deadline) const {
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    if (!wait_for(fd_, POLLOUT, deadline)) return false;
    const ssize_t n = ::send(fd_, p, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

bool TcpSocket::recv_all(void* data, size_t bytes, Deadline deadline) const {
  auto* p = static_cast<char*>(data);
  while (bytes > 0) {
    if (!wait_for(fd_, POLLIN, deadline)) return false;
    const ssize_t n = ::recv(fd_, p, bytes, MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace dsv4
