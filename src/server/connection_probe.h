// Whether the client of a request has gone away, known the moment it happens. While a request is handled,
// the RequestReader keeps its connection in epoll for the peer's FIN or RST only (pending bytes of a
// pipelined request are not read and do not count) and marks the request's PeerWatch when one arrives.
// Handlers poll closed() or register on_close() hooks, which run at once on the reader's thread: a
// generation aborts its engine requests there, so a long prefill for a client that left stops at the next
// engine step (one chunk), not after a polling interval or the next write.
//
// A client that half-closes (shuts down its sending side) after its request counts as gone, as it did for
// cpp-httplib's own disconnect check.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

namespace dsv4::server {

// One request's view of its connection, shared by the reader (which marks it) and the handler.
class PeerWatch {
 public:
  bool closed() const { return closed_.load(); }
  // Runs `hook` when the peer leaves, or at once (on the caller's thread) when it has already left.
  void on_close(std::function<void()> hook);
  // The reader saw the peer leave: runs the hooks, once.
  void mark_closed();
  // The request was answered: drops the hooks; none runs after this returns.
  void detach();

 private:
  std::mutex mu_;  // held while hooks run, so detach() waits for a running one
  std::atomic<bool> closed_{false};
  bool detached_ = false;
  std::vector<std::function<void()>> hooks_;
};

class ConnectionProbe {
 public:
  ConnectionProbe() = default;  // no connection: never closed
  explicit ConnectionProbe(std::shared_ptr<PeerWatch> watch) : watch_(std::move(watch)) {}

  // The request the calling thread is handling (see ProbeScope); unattached outside one.
  static ConnectionProbe current();

  bool found() const { return watch_ != nullptr; }
  // True once the peer has closed or reset the connection.
  bool closed() const { return watch_ && watch_->closed(); }
  // See PeerWatch::on_close; nothing happens for an unattached probe.
  void on_close(std::function<void()> hook) const;

 private:
  std::shared_ptr<PeerWatch> watch_;
};

// Makes `watch` the calling thread's current request for its lifetime (the server sets it around a handler:
// cpp-httplib calls handlers and content providers on the thread that serves the request).
class ProbeScope {
 public:
  explicit ProbeScope(std::shared_ptr<PeerWatch> watch);
  ~ProbeScope();
  ProbeScope(const ProbeScope&) = delete;
  ProbeScope& operator=(const ProbeScope&) = delete;

 private:
  std::shared_ptr<PeerWatch> previous_;
};

}  // namespace dsv4::server
