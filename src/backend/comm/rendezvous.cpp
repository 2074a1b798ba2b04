#include "backend/comm/rendezvous.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string_view>

#include "backend/comm/tcp_socket.h"
#include "core/error.h"

namespace dsv4 {

namespace {

constexpr uint32_t kMagic = 0x44535634;  // "DSV4": a stray connection is told apart from a rank
constexpr uint32_t kMaxReply = 1u << 20;

// A rank's hello: magic, world size, rank (network order).
using Hello = std::array<uint32_t, 3>;
// Rank 0's reply: status (0: the blob follows, 1: a refusal message follows) and its length.
using ReplyHeader = std::array<uint32_t, 2>;

std::string where(const RendezvousOptions& o) { return fmt::format("{}:{}", o.master_addr, o.master_port); }

void reply(const TcpSocket& s, uint32_t status, std::span<const std::byte> payload, Deadline deadline) {
  const ReplyHeader h{htonl(status), htonl(static_cast<uint32_t>(payload.size()))};
  if (s.send_all(h.data(), sizeof(h), deadline)) s.send_all(payload.data(), payload.size(), deadline);
}

void refuse(const TcpSocket& s, std::string_view message, Deadline deadline) {
  reply(s, 1, std::as_bytes(std::span(message)), deadline);
}

// Rank 0: waits for every other rank, then hands out the blob (or the reason it gives up to those that came).
class Host {
 public:
  Host(const RendezvousOptions& o, std::span<const std::byte> blob)
      : o_(o), blob_(blob), peers_(static_cast<size_t>(o.world_size)) {}

  void run() {
    const Deadline deadline = std::chrono::steady_clock::now() + o_.timeout;
    const TcpSocket listener = TcpSocket::listen(o_.master_port);
    for (int arrived = 1; arrived < o_.world_size;) {
      std::optional<TcpSocket> s = listener.accept(deadline);
      if (!s)
        give_up(fmt::format("rank(s) {} never joined within {} ms", fmt::join(missing(), ", "), o_.timeout.count()));
      if (admit(std::move(*s), deadline)) ++arrived;
    }
    for (int r = 1; r < o_.world_size; ++r) reply(peers_[static_cast<size_t>(r)], 0, blob_, deadline);
  }

 private:
  // Reads a hello; keeps the socket of a valid rank, refuses a misconfigured one (ending the rendezvous).
  bool admit(TcpSocket s, Deadline deadline) {
    Hello h{};
    // Short: a silent connection must not take the whole timeout.
    const Deadline hello_by = std::min(deadline, std::chrono::steady_clock::now() + std::chrono::seconds(5));
    if (!s.recv_all(h.data(), sizeof(h), hello_by) || ntohl(h[0]) != kMagic) return false;  // not a rank
    const auto size = static_cast<int>(ntohl(h[1]));
    const auto rank = static_cast<int>(ntohl(h[2]));
    std::string bad;
    if (size != o_.world_size) {
      bad = fmt::format("rank {} has world size {}, rank 0 has {}", rank, size, o_.world_size);
    } else if (rank < 1 || rank >= o_.world_size) {
      bad = fmt::format("rank {} is outside world size {}", rank, o_.world_size);
    } else if (joined(rank)) {
      bad = fmt::format("rank {} joined twice", rank);
    }
    if (!bad.empty()) {
      refuse(s, "rendezvous at " + where(o_) + " failed: " + bad, deadline);
      give_up(bad);
    }
    peers_[static_cast<size_t>(rank)] = std::move(s);
    return true;
  }

  bool joined(int rank) const { return peers_[static_cast<size_t>(rank)].is_open(); }

  std::vector<int> missing() const {
    std::vector<int> m;
    for (int r = 1; r < o_.world_size; ++r) {
      if (!joined(r)) m.push_back(r);
    }
    return m;
  }

  [[noreturn]] void give_up(const std::string& why) {
    const std::string message = "rendezvous at " + where(o_) + " failed: " + why;
    const Deadline soon = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    for (int r = 1; r < o_.world_size; ++r) {
      if (joined(r)) refuse(peers_[static_cast<size_t>(r)], message, soon);
    }
    throw Error(message);
  }

  const RendezvousOptions& o_;
  std::span<const std::byte> blob_;
  std::vector<TcpSocket> peers_;  // by rank; an empty socket until the rank joined
};

std::vector<std::byte> join(const RendezvousOptions& o) {
  const Deadline deadline = std::chrono::steady_clock::now() + o.timeout;
  const std::string who = fmt::format("rank {}", o.rank);
  std::optional<TcpSocket> s = TcpSocket::connect(o.master_addr, o.master_port, deadline);
  DSV4_CHECK(s, "{} could not reach rank 0 at {} within {} ms", who, where(o), o.timeout.count());
  const Hello h{htonl(kMagic), htonl(static_cast<uint32_t>(o.world_size)), htonl(static_cast<uint32_t>(o.rank))};
  ReplyHeader r{};
  // Rank 0 decides when the ranks have not all come, at its own deadline: its verdict gets a little longer.
  const Deadline answer_by = deadline + std::min<std::chrono::milliseconds>(o.timeout, std::chrono::seconds(2));
  DSV4_CHECK(s->send_all(h.data(), sizeof(h), deadline) && s->recv_all(r.data(), sizeof(r), answer_by),
             "{}: rank 0 at {} gave no answer within {} ms (some rank never joined?)", who, where(o),
             o.timeout.count());
  const uint32_t status = ntohl(r[0]), length = ntohl(r[1]);
  DSV4_CHECK(length <= kMaxReply, "{}: rank 0 at {} answered {} bytes: not a dsv4 rendezvous", who, where(o), length);
  std::vector<std::byte> payload(length);
  DSV4_CHECK(s->recv_all(payload.data(), length, answer_by), "{}: rank 0 at {} closed the rendezvous", who, where(o));
  if (status != 0) fail("{}: {}", who, std::string_view(reinterpret_cast<const char*>(payload.data()), length));
  return payload;
}

}  // namespace

int global_rank(int node_rank, int ranks_per_node, int local_rank) {
  DSV4_CHECK(local_rank >= 0 && local_rank < ranks_per_node, "local rank {} of {} a node", local_rank, ranks_per_node);
  return node_rank * ranks_per_node + local_rank;
}

std::vector<std::byte> rendezvous(const RendezvousOptions& o, std::span<const std::byte> blob) {
  DSV4_CHECK(o.world_size >= 1 && o.rank >= 0 && o.rank < o.world_size, "rendezvous: rank {} of world size {}", o.rank,
             o.world_size);
  DSV4_CHECK(o.master_port > 0 && o.master_port < 65536, "rendezvous: master port {} out of range", o.master_port);
  if (o.rank != 0) return join(o);
  DSV4_CHECK(blob.size() <= kMaxReply, "rendezvous: a blob of {} bytes is too large", blob.size());
  if (o.world_size > 1) Host(o, blob).run();
  return {blob.begin(), blob.end()};
}

}  // namespace dsv4
