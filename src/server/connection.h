// One client connection of the RequestReader. The reader's thread owns it while it reads a request; from
// dispatch until release a request thread owns it and the reader only watches for the peer leaving (which
// it reports through the request's PeerWatch). The socket is non-blocking throughout.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "server/connection_probe.h"
#include "server/request_framer.h"

namespace dsv4::server {

class Connection {
 public:
  Connection(uint64_t id, int fd, size_t max_body_bytes);

  int fd() const { return fd_; }
  // The complete request's bytes (valid from dispatch to release).
  std::string_view request() const {
    return std::string_view(buffer_).substr(framer_.begin(), framer_.end() - framer_.begin());
  }
  const RequestHead& head() const { return framer_.head(); }
  const std::shared_ptr<PeerWatch>& watch() const { return watch_; }
  const std::string& remote_addr() const { return remote_addr_; }
  int remote_port() const { return remote_port_; }
  const std::string& local_addr() const { return local_addr_; }
  int local_port() const { return local_port_; }

 private:
  friend class RequestReader;
  using Clock = std::chrono::steady_clock;
  enum class Phase { kReading, kBusy, kLingering };

  uint64_t id_;
  int fd_;
  std::string remote_addr_, local_addr_;
  int remote_port_ = 0, local_port_ = 0;
  std::string buffer_;  // received, not yet consumed
  RequestFramer framer_;
  std::shared_ptr<PeerWatch> watch_ = std::make_shared<PeerWatch>();
  Phase phase_ = Phase::kReading;
  Clock::time_point deadline_;
  bool continue_sent_ = false;
  bool peer_done_ = false;  // the peer will send nothing more (end of file)
  size_t discarded_ = 0;    // kLingering: bytes read and dropped
};

}  // namespace dsv4::server
