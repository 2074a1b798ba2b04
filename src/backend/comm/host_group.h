// HostGroup: the meeting point of the ranks of one process (threads), made once for `size` ranks with a
// timeout and shared by their HostCommunicators. Each collective is a sequence-numbered rendezvous in
// two phases: enter() publishes the rank's call and returns once every rank has entered the same
// collective (calls checked against each other), after which the rank reads its peers' buffers; done()
// returns once every rank has finished reading, so no buffer is released or overwritten while a peer
// reads it.
//
// Errors, never hangs: a rank that waits past the timeout aborts the group with a message naming the
// collective, its number and the ranks that never came; abort() (a rank that failed) makes every rank's
// current and later collectives throw its reason; a rank whose communicator is gone fails the
// collectives that wait for it at once.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace dsv4 {

// What one rank asked for in one collective, with its buffers: what its peers compare and read.
struct CollectiveCall {
  const char* name = "";                               // "all_gather", ...
  size_t bytes = 0;                                    // per rank (all_gather, broadcast) or in all (reductions)
  DType type = DType::kU8;                             // reductions
  int root = -1;                                       // broadcast
  std::span<const size_t> send_bytes{}, recv_bytes{};  // all_to_all
  const void* send = nullptr;
  void* recv = nullptr;
};

class HostGroup {
 public:
  HostGroup(int size, std::chrono::milliseconds timeout);

  int size() const { return size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // Every rank's current and later collectives throw `reason` (the first reason wins).
  void abort(const std::string& reason);
  // The rank's communicator is gone: collectives waiting for it fail at once.
  void leave(int rank);

  // Publishes `call` as the rank's next collective; returns its number once every rank has entered it.
  uint64_t enter(int rank, const CollectiveCall& call);
  // A peer's call in the collective the caller entered (valid until the caller's done()).
  const CollectiveCall& call(int rank) const { return slots_[static_cast<size_t>(rank)].call; }
  // The rank has finished reading its peers' buffers; returns once every rank has.
  void done(int rank, uint64_t seq);

 private:
  struct Slot {
    CollectiveCall call;
    uint64_t entered = 0, finished = 0;  // numbers of the last collective entered, finished
    bool gone = false;
  };

  // Waits until every rank's `counter` reaches seq; throws (aborting the group) on timeout or a gone rank.
  void wait_all(std::unique_lock<std::mutex>& lock, int rank, uint64_t seq, uint64_t Slot::*counter, const char* never);
  std::vector<int> behind(uint64_t seq, uint64_t Slot::*counter) const;
  [[noreturn]] void abort_locked(const std::string& reason);
  void throw_if_aborted() const;
  std::string mismatch(uint64_t seq) const;

  const int size_;
  const std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Slot> slots_;
  std::string reason_;   // set once the group is aborted
  std::string verdict_;  // how the calls of the collective everyone entered last differ ("" when they match)
};

}  // namespace dsv4
