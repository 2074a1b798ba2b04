// Raw loopback sockets for the server's connection tests: clients that send half a request, stall, pipeline
// or stream a body, which no HTTP client library does on purpose.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace dsv4::servertest {

// A connected socket to 127.0.0.1:port, or -1.
inline int connect_loopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline bool send_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Reads until `done(received)` holds, the peer closes, or `timeout` passes. `closed` says whether it closed.
template <typename Done>
std::string read_until(int fd, std::chrono::milliseconds timeout, Done done, bool* closed = nullptr) {
  std::string got;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  if (closed != nullptr) *closed = false;
  while (!done(got)) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(left, 0))) <= 0) break;  // a zero timeout looks once
    char buf[16384];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      if (closed != nullptr) *closed = true;
      break;
    }
    got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

// Whether `s` holds `count` whole responses with Content-Length bodies.
inline bool has_responses(const std::string& s, int count) {
  size_t at = 0;
  for (int i = 0; i < count; ++i) {
    const size_t head_end = s.find("\r\n\r\n", at);
    if (head_end == std::string::npos) return false;
    const size_t cl = s.find("Content-Length: ", at);
    const size_t len = cl != std::string::npos && cl < head_end ? std::stoul(s.substr(cl + 16)) : 0;
    if (s.size() < head_end + 4 + len) return false;
    at = head_end + 4 + len;
  }
  return true;
}

// The status of the response starting at s[at] (0 when there is none).
inline int status_at(const std::string& s, size_t at = 0) {
  if (s.compare(at, 9, "HTTP/1.1 ") != 0 || s.size() < at + 12) return 0;
  return std::atoi(s.substr(at + 9, 3).c_str());
}

// Raises the soft limit on open descriptors to at least `want`; false when the hard limit is lower.
inline bool ensure_descriptors(rlim_t want) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return false;
  if (lim.rlim_cur >= want) return true;
  if (lim.rlim_max < want) return false;
  lim.rlim_cur = want;
  return ::setrlimit(RLIMIT_NOFILE, &lim) == 0;
}

// Resident memory of this process, in bytes (/proc/self/statm).
inline int64_t resident_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  long size = 0, resident = 0;
  if (f == nullptr) return -1;
  const int n = std::fscanf(f, "%ld %ld", &size, &resident);
  std::fclose(f);
  return n == 2 ? static_cast<int64_t>(resident) * ::sysconf(_SC_PAGESIZE) : -1;
}

}  // namespace dsv4::servertest
