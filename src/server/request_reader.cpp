#include "server/request_reader.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace dsv4::server {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr uint64_t kListenerId = 0, kWakeId = 1;
constexpr size_t kReadPerEvent = 1 << 20;  // then the other connections get their turn
constexpr auto kLinger = 2s;               // after a refusal: how long what the client still sends is dropped
constexpr size_t kMaxDiscard = 16 << 20;   // ... and how much of it
constexpr auto kSweepEvery = 100ms;        // timeout resolution
constexpr auto kAcceptPause = 100ms;       // out of descriptors: retry accepting after this
constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

Clock::duration after(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

const char* reason(int status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 408:
      return "Request Timeout";
    case 413:
      return "Payload Too Large";
    case 415:
      return "Unsupported Media Type";
    case 417:
      return "Expectation Failed";
    case 431:
      return "Request Header Fields Too Large";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Error";
  }
}

std::string error_response(const ApiError& e) {
  const std::string body = error_body(e);
  return fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{}Connection: close\r\n\r\n{}",
      e.status(), reason(e.status()), body.size(), e.status() == 503 ? "Retry-After: 1\r\n" : "", body);
}

// Writes what the socket takes now; a reply that does not fit (never seen: they are small) is cut.
void send_now(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data.remove_prefix(static_cast<size_t>(n));
  }
}

}  // namespace

RequestReader::RequestReader(int listen_fd, ReaderOptions options, Dispatch dispatch)
    : options_(options), dispatch_(std::move(dispatch)), listen_fd_(listen_fd) {
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  DSV4_CHECK(epoll_fd_ >= 0 && wake_fd_ >= 0, "serve: cannot create the event loop: {}", std::strerror(errno));
  epoll_event listen_ev{EPOLLIN, {.u64 = kListenerId}};
  epoll_event wake_ev{EPOLLIN, {.u64 = kWakeId}};
  DSV4_CHECK(::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &listen_ev) == 0 &&
                 ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &wake_ev) == 0,
             "serve: cannot watch the listening socket: {}", std::strerror(errno));
}

RequestReader::~RequestReader() {
  stop();
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void RequestReader::start() {
  last_sweep_ = Clock::now();
  thread_ = std::thread([this] { loop(); });
}

void RequestReader::release(std::shared_ptr<Connection> c, bool keep_alive) {
  {
    std::lock_guard lock(mu_);
    if (!stopped_) {
      released_.emplace_back(std::move(c), keep_alive);
    } else {
      ::close(c->fd_);  // nobody reads it any more
      --num_connections_;
      return;
    }
  }
  wake();
}

void RequestReader::wake() {
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof(one));
}

void RequestReader::close_listener() {
  std::unique_lock lock(mu_);
  if (!thread_.joinable() || stopped_) {
    lock.unlock();
    close_listener_now();  // no loop running: nobody else touches it
    return;
  }
  close_listener_ = true;
  wake();
  cv_.wait(lock, [&] { return listener_closed_; });
}

void RequestReader::stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  wake();
  if (thread_.joinable()) thread_.join();
  std::deque<std::pair<std::shared_ptr<Connection>, bool>> released;
  {
    std::lock_guard lock(mu_);
    stopped_ = true;
    released.swap(released_);
  }
  for (auto& [c, keep] : released) c->phase_ = Connection::Phase::kReading;  // handled: closed below
  std::vector<uint64_t> ids;
  for (const auto& [id, c] : conns_) {
    if (c->phase_ != Connection::Phase::kBusy) ids.push_back(id);
  }
  for (const uint64_t id : ids) close(id);
  close_listener_now();
}

void RequestReader::loop() {
  std::vector<epoll_event> events(256);
  while (take_commands()) {
    const int n = ::epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()),
                               static_cast<int>(std::chrono::milliseconds(kSweepEvery).count()));
    for (int i = 0; i < n; ++i)
      on_event(events[static_cast<size_t>(i)].data.u64, events[static_cast<size_t>(i)].events);
    if (Clock::now() - last_sweep_ >= kSweepEvery) sweep();
  }
}

// Connections given back by request threads, and the other threads' requests; false once stopping.
bool RequestReader::take_commands() {
  std::deque<std::pair<std::shared_ptr<Connection>, bool>> released;
  bool close_listener = false;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return false;
    released.swap(released_);
    close_listener = close_listener_ && !listener_closed_;
  }
  if (close_listener) close_listener_now();
  for (auto& [c, keep] : released) take_back(c, keep);
  return true;
}

void RequestReader::close_listener_now() {
  if (listen_fd_ >= 0) {
    if (epoll_fd_ >= 0) ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
    ::close(listen_fd_);
    listen_fd_ = -1;
  }
  std::lock_guard lock(mu_);
  listener_closed_ = true;
  cv_.notify_all();
}

void RequestReader::accept_all() {
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors or memory: the connection stays in the backlog; stop watching the listener
        // for a moment (it stays readable, so watching it would spin).
        if (!accept_failing_) {  // once per episode: it repeats every pause while the cause lasts
          spdlog::warn("http: cannot accept connections ({}) with {} open; new ones wait in the backlog",
                       std::strerror(errno), conns_.size());
        }
        accept_failing_ = true;
        epoll_event ev{0, {.u64 = kListenerId}};
        ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
        accept_paused_until_ = Clock::now() + kAcceptPause;
      } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
        spdlog::warn("http: accept failed: {}", std::strerror(errno));
      }
      return;
    }
    accept_failing_ = false;
    const int yes = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));  // stream tokens as they come
    auto c = std::make_shared<Connection>(next_id_++, fd, options_.max_body_bytes);
    c->deadline_ = Clock::now() + after(options_.keep_alive_timeout);
    watch(*c, EPOLLIN | EPOLLRDHUP, EPOLL_CTL_ADD);
    conns_.emplace(c->id_, std::move(c));
    ++num_connections_;
  }
}

void RequestReader::on_event(uint64_t id, uint32_t events) {
  if (id == kListenerId) return accept_all();
  if (id == kWakeId) {
    uint64_t count = 0;
    [[maybe_unused]] const ssize_t n = ::read(wake_fd_, &count, sizeof(count));
    return;  // the loop takes the commands next
  }
  const auto it = conns_.find(id);
  if (it == conns_.end()) return;  // closed earlier in this round
  const std::shared_ptr<Connection> c = it->second;
  switch (c->phase_) {
    case Connection::Phase::kBusy:
      if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) c->watch_->mark_closed();
      return;
    case Connection::Phase::kLingering:
      return discard_some(*c);
    case Connection::Phase::kReading:
      read_some(*c);
      if (conns_.count(id)) advance(c);
      return;
  }
}

void RequestReader::read_some(Connection& c) {
  size_t total = 0;
  while (total < kReadPerEvent && !c.peer_done_) {
    // Through a scratch buffer, so that a connection holds only what it sent (a thousand half-open sockets
    // must not hold a read-sized buffer each).
    const ssize_t n = ::recv(c.fd_, scratch_.data(), scratch_.size(), 0);
    if (n > 0) {
      c.buffer_.append(scratch_.data(), static_cast<size_t>(n));
      buffered_ += static_cast<size_t>(n);
      total += static_cast<size_t>(n);
      if (static_cast<size_t>(n) < scratch_.size()) return;  // drained
    } else if (n == 0) {
      c.peer_done_ = true;
    } else if (errno != EINTR) {
      if (errno != EAGAIN && errno != EWOULDBLOCK) close(c.id_);  // reset
      return;
    }
  }
}

void RequestReader::discard_some(Connection& c) {
  char buf[16 << 10];
  for (;;) {
    const ssize_t n = ::recv(c.fd_, buf, sizeof(buf), 0);
    if (n > 0) {
      c.discarded_ += static_cast<size_t>(n);
      if (c.discarded_ > kMaxDiscard) return close(c.id_);
      continue;
    }
    if (n < 0 && (errno == EINTR)) continue;
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) close(c.id_);
    return;
  }
}

// Scans what arrived: dispatches a complete request, refuses a bad one, or sets the deadline of the phase.
void RequestReader::advance(const std::shared_ptr<Connection>& c) {
  const RequestFramer::State before = c->framer_.state();
  switch (c->framer_.feed(c->buffer_)) {
    case RequestFramer::State::kComplete:
      return dispatch_request(c);
    case RequestFramer::State::kFailed:
      return refuse(*c, c->framer_.error());
    case RequestFramer::State::kIdle:
      break;
    case RequestFramer::State::kHead:
      if (before == RequestFramer::State::kIdle) c->deadline_ = Clock::now() + after(options_.header_timeout);
      break;
    case RequestFramer::State::kBody:
      if (buffered_ > options_.max_buffered_bytes) {
        return refuse(*c, unavailable(fmt::format("The server holds {} bytes of request bodies in flight, its limit; "
                                                  "retry later",
                                                  options_.max_buffered_bytes)));
      }
      c->deadline_ = Clock::now() + after(options_.body_timeout);
      if (c->framer_.head().expect_continue && !c->continue_sent_) {
        c->continue_sent_ = true;
        send_now(c->fd_, kContinue);
      }
      break;
  }
  if (c->peer_done_) close(c->id_);  // the client stopped sending before its request was whole
}

void RequestReader::dispatch_request(const std::shared_ptr<Connection>& c) {
  c->phase_ = Connection::Phase::kBusy;
  // Only the peer leaving now: bytes of a next request wait in the socket until this one is answered.
  watch(*c, EPOLLRDHUP | EPOLLONESHOT, EPOLL_CTL_MOD);
  if (!dispatch_(c)) close(c->id_);
}

void RequestReader::take_back(const std::shared_ptr<Connection>& c, bool keep_alive) {
  if (!conns_.count(c->id_)) return;
  c->phase_ = Connection::Phase::kReading;
  if (!keep_alive || c->watch_->closed() || c->peer_done_) return close(c->id_);
  buffered_ -= c->framer_.end();
  c->buffer_.erase(0, c->framer_.end());
  if (c->buffer_.capacity() > kReadPerEvent) c->buffer_.shrink_to_fit();  // an idle connection keeps little
  c->framer_.reset();
  c->watch_ = std::make_shared<PeerWatch>();
  c->continue_sent_ = false;
  c->deadline_ = Clock::now() + after(options_.keep_alive_timeout);
  watch(*c, EPOLLIN | EPOLLRDHUP, EPOLL_CTL_MOD);
  advance(c);  // a pipelined request may be here already
}

void RequestReader::refuse(Connection& c, const ApiError& e) {
  spdlog::debug("http: refused a request from {}:{}: {} {}", c.remote_addr_, c.remote_port_, e.status(), e.what());
  send_now(c.fd_, error_response(e));
  if (c.peer_done_) return close(c.id_);
  ::shutdown(c.fd_, SHUT_WR);
  buffered_ -= c.buffer_.size();
  std::string().swap(c.buffer_);  // the request's bytes are not needed any more
  c.phase_ = Connection::Phase::kLingering;
  c.deadline_ = Clock::now() + kLinger;
}

void RequestReader::sweep() {
  const auto now = Clock::now();
  last_sweep_ = now;
  if (accept_paused_until_ != Clock::time_point{} && now >= accept_paused_until_ && listen_fd_ >= 0) {
    accept_paused_until_ = {};
    epoll_event ev{EPOLLIN, {.u64 = kListenerId}};
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
  }
  std::vector<std::shared_ptr<Connection>> expired;
  for (const auto& [id, c] : conns_) {
    if (c->phase_ != Connection::Phase::kBusy && now >= c->deadline_) expired.push_back(c);
  }
  for (const auto& c : expired) {
    if (c->phase_ == Connection::Phase::kLingering) {
      close(c->id_);
    } else if (c->framer_.state() == RequestFramer::State::kIdle) {
      close_or_read_idle(c);
    } else {
      const bool head = c->framer_.state() == RequestFramer::State::kHead;
      refuse(*c, ApiError(408, "invalid_request_error",
                          head ? fmt::format("The request line and headers did not arrive within {} s",
                                             options_.header_timeout)
                               : fmt::format("The request body sent nothing for {} s", options_.body_timeout)));
    }
  }
}

// An idle connection past its deadline is closed, unless a request began arriving after the last poll:
// closing then would drop a request the client already sent.
void RequestReader::close_or_read_idle(const std::shared_ptr<Connection>& c) {
  char byte = 0;
  if (::recv(c->fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT) <= 0) return close(c->id_);
  read_some(*c);
  if (conns_.count(c->id_)) advance(c);
}

void RequestReader::watch(const Connection& c, uint32_t events, int op) {
  epoll_event ev{events, {.u64 = c.id_}};
  if (::epoll_ctl(epoll_fd_, op, c.fd_, &ev) != 0) {
    spdlog::warn("http: cannot watch a connection: {}", std::strerror(errno));
  }
}

void RequestReader::close(uint64_t id) {
  const auto it = conns_.find(id);
  if (it == conns_.end()) return;
  buffered_ -= it->second->buffer_.size();
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, it->second->fd_, nullptr);
  ::close(it->second->fd_);
  conns_.erase(it);
  --num_connections_;
}

}  // namespace dsv4::server
