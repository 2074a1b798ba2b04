#include "server/connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

namespace dsv4::server {
namespace {

// An IP socket address as text and port (empty for other families).
void address_of(const sockaddr_storage& ss, std::string& addr, int& port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf));
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf));
    port = ntohs(a->sin6_port);
  }
  addr = buf;
}

}  // namespace

Connection::Connection(uint64_t id, int fd, size_t max_body_bytes) : id_(id), fd_(fd), framer_(max_body_bytes) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) address_of(ss, remote_addr_, remote_port_);
  len = sizeof(ss);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) address_of(ss, local_addr_, local_port_);
}

}  // namespace dsv4::server
