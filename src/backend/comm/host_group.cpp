#include "backend/comm/host_group.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace dsv4 {

HostGroup::HostGroup(int size, std::chrono::milliseconds timeout)
    : size_(size), timeout_(timeout), slots_(static_cast<size_t>(std::max(size, 0))) {
  DSV4_CHECK(size >= 1, "a host group needs at least one rank, not {}", size);
  DSV4_CHECK(timeout.count() > 0, "a host group needs a positive timeout");
}

void HostGroup::abort(const std::string& reason) {
  std::lock_guard lock(mu_);
  if (reason_.empty()) reason_ = reason;
  cv_.notify_all();
}

void HostGroup::leave(int rank) {
  std::lock_guard lock(mu_);
  slots_.at(static_cast<size_t>(rank)).gone = true;
  cv_.notify_all();
}

void HostGroup::abort_locked(const std::string& reason) {
  if (reason_.empty()) reason_ = reason;
  cv_.notify_all();
  throw Error(reason_);
}

void HostGroup::throw_if_aborted() const {
  if (!reason_.empty()) throw Error(reason_);
}

std::vector<int> HostGroup::behind(uint64_t seq, uint64_t Slot::*counter) const {
  std::vector<int> ranks;
  for (int r = 0; r < size_; ++r) {
    if (slots_[static_cast<size_t>(r)].*counter < seq) ranks.push_back(r);
  }
  return ranks;
}

void HostGroup::wait_all(std::unique_lock<std::mutex>& lock, int rank, uint64_t seq, uint64_t Slot::*counter,
                         const char* never) {
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  const char* name = slots_[static_cast<size_t>(rank)].call.name;
  for (;;) {
    const std::vector<int> missing = behind(seq, counter);
    if (missing.empty()) return;
    // Once everyone has entered, every rank reads its peers' buffers, so an abort is reported by done().
    if (counter == &Slot::entered) throw_if_aborted();
    for (int r : missing) {
      if (slots_[static_cast<size_t>(r)].gone) {
        abort_locked(fmt::format("HostCommunicator: {} #{}: rank {} left the group before it", name, seq, r));
      }
    }
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && !behind(seq, counter).empty()) {
      abort_locked(fmt::format("HostCommunicator: {} #{} timed out after {} ms on rank {}: rank(s) {} never {}", name,
                               seq, timeout_.count(), rank, fmt::join(behind(seq, counter), ", "), never));
    }
  }
}

namespace {

std::string describe(const CollectiveCall& c) {
  std::string s = fmt::format("{}(bytes={}", c.name, c.bytes);
  if (std::strcmp(c.name, "reduce_scatter") == 0 || std::strcmp(c.name, "all_reduce") == 0) {
    s += fmt::format(", {}", dtype_name(c.type));
  }
  if (c.root >= 0) s += fmt::format(", root={}", c.root);
  return s + ")";
}

}  // namespace

// The first difference between the ranks' calls of collective seq ("" when they match); every rank finds
// the same one.
std::string HostGroup::mismatch(uint64_t seq) const {
  const CollectiveCall& c0 = slots_[0].call;
  for (int r = 1; r < size_; ++r) {
    const CollectiveCall& c = slots_[static_cast<size_t>(r)].call;
    if (std::strcmp(c.name, c0.name) != 0 || c.bytes != c0.bytes || c.type != c0.type || c.root != c0.root) {
      return fmt::format("HostCommunicator: collective #{} differs across ranks: rank 0 called {}, rank {} called {}",
                         seq, describe(c0), r, describe(c));
    }
  }
  if (std::strcmp(c0.name, "all_to_all") != 0) return "";
  for (int p = 0; p < size_; ++p) {
    for (int q = 0; q < size_; ++q) {
      const size_t sent = slots_[static_cast<size_t>(p)].call.send_bytes[static_cast<size_t>(q)];
      const size_t expected = slots_[static_cast<size_t>(q)].call.recv_bytes[static_cast<size_t>(p)];
      if (sent != expected) {
        return fmt::format("HostCommunicator: all_to_all #{}: rank {} sends {} bytes to rank {}, which expects {}", seq,
                           p, sent, q, expected);
      }
    }
  }
  return "";
}

uint64_t HostGroup::enter(int rank, const CollectiveCall& call) {
  DSV4_CHECK(rank >= 0 && rank < size_, "rank {} is outside a host group of {}", rank, size_);
  std::unique_lock lock(mu_);
  throw_if_aborted();
  Slot& slot = slots_[static_cast<size_t>(rank)];
  slot.call = call;
  const uint64_t seq = ++slot.entered;
  // The last rank to come compares the calls while the others still wait, so no rank reads a call whose
  // rank has already given up on it.
  if (behind(seq, &Slot::entered).empty()) verdict_ = mismatch(seq);
  cv_.notify_all();
  try {
    wait_all(lock, rank, seq, &Slot::entered, "arrived");
  } catch (...) {
    --slot.entered;  // withdrawn: a late peer must not take this rank's buffers as still there
    throw;
  }
  if (!verdict_.empty()) abort_locked(verdict_);
  return seq;
}

void HostGroup::done(int rank, uint64_t seq) {
  std::unique_lock lock(mu_);
  slots_[static_cast<size_t>(rank)].finished = seq;
  cv_.notify_all();
  wait_all(lock, rank, seq, &Slot::finished, "finished reading");
  throw_if_aborted();
}

}  // namespace dsv4
