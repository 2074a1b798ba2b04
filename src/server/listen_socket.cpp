#include "server/listen_socket.h"

#include <netdb.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace dsv4::server {
namespace {

constexpr int kListenBacklog = 4096;  // the kernel caps it at net.core.somaxconn

// A socket bound to `ai` and listening, or -1.
int bind_and_listen(const addrinfo& ai) {
  const int fd = ::socket(ai.ai_family, ai.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai.ai_protocol);
  if (fd < 0) return -1;
  const int yes = 1, no = 0;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  if (ai.ai_family == AF_INET6) ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &no, sizeof(no));
  if (::bind(fd, ai.ai_addr, ai.ai_addrlen) == 0 && ::listen(fd, kListenBacklog) == 0) return fd;
  ::close(fd);
  return -1;
}

}  // namespace

int listen_socket(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  const int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found);
  DSV4_CHECK(rc == 0, "serve: cannot listen on {}:{}: {}", host, port, ::gai_strerror(rc));
  int fd = -1;
  int error = 0;
  for (const addrinfo* ai = found; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = bind_and_listen(*ai);
    if (fd < 0) error = errno;
  }
  ::freeaddrinfo(found);
  DSV4_CHECK(fd >= 0, "serve: cannot listen on {}:{} ({}: in use, or not an address here)", host, port,
             std::strerror(error));
  return fd;
}

int bound_port(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  DSV4_CHECK(::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0, "serve: getsockname failed: {}",
             std::strerror(errno));
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port);
  return ntohs(reinterpret_cast<const sockaddr_in*>(&ss)->sin_port);
}

void raise_descriptor_limit() {
  // Enough for tens of thousands of connections; some containers' hard limits (2^30) would only make
  // children that walk every possible descriptor slow.
  constexpr rlim_t kEnough = 1 << 16;
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur >= std::min(lim.rlim_max, kEnough)) return;
  const rlim_t before = lim.rlim_cur;
  lim.rlim_cur = std::min(lim.rlim_max, kEnough);
  if (::setrlimit(RLIMIT_NOFILE, &lim) == 0) {
    spdlog::debug("http: open descriptor limit raised from {} to {}", before, lim.rlim_cur);
  }
}

}  // namespace dsv4::server
