// Whether the client of a request has gone away, without writing to it. cpp-httplib 0.11.4 tells a
// handler nothing about its socket and notices a disconnect only when a write fails, so a non-streaming
// request (or a stream in a long prefill) would run to the end for nobody. The probe finds the
// connection's socket among the process's descriptors by its peer address (unique among live
// connections, and the socket stays open while its handler runs) and peeks at it: end of file or a reset
// means the client closed. When the socket cannot be found the probe reports "connected".
#pragma once

#include <string>

namespace dsv4::server {

class ConnectionProbe {
 public:
  ConnectionProbe(const std::string& remote_addr, int remote_port);

  bool found() const { return fd_ >= 0; }
  // True once the peer has closed or reset the connection (pending request bytes do not count).
  bool closed() const;

 private:
  int fd_ = -1;
};

}  // namespace dsv4::server
