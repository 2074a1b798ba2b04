// Communicator: the collectives between the ranks of a sharded model. Buffers live on the
// communicator's Device and every operation is ordered on that device's work queue (for CUDA: its
// current stream). Three implementations: HostCommunicator (ranks are threads of one process, host
// memory: the CPU backend), StagedCommunicator (device buffers staged through a host communicator,
// so several ranks can share one GPU) and NcclCommunicator (backend/cuda: one GPU a rank).
//
// Reductions sum f32 or bf16 elements. The host implementations add in rank order 0, 1, 2, ... in fp32
// and round once, so every rank gets the same bits, run after run; NCCL's order is its own. That is why
// the exact tier's sharding only gathers and never reduces: reductions serve the fast tier.
//
// Every rank must make the same calls in the same order with matching sizes; the host implementations
// detect a mismatch and say which ranks differ, NCCL does not. A communicator belongs to its rank: one
// thread calls it at a time (abort() excepted).
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "backend/device.h"
#include "core/dtype.h"
#include "core/error.h"

namespace dsv4 {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Where the buffers of every collective live.
  virtual Device& device() = 0;

  // Each rank contributes `bytes` from send; recv (size() × bytes) holds rank r's at r × bytes.
  // In place when send == recv + rank() × bytes.
  virtual void all_gather(const void* send, void* recv, size_t bytes) = 0;
  // send holds size() blocks of `count` elements; recv gets the sum over ranks of block rank().
  // In place when recv == send + rank() × count elements. `type`: kF32 or kBF16.
  virtual void reduce_scatter(const void* send, void* recv, size_t count, DType type) = 0;
  // recv (count elements) gets the sum over ranks of send; send == recv is allowed.
  virtual void all_reduce(const void* send, void* recv, size_t count, DType type) = 0;
  // send_bytes[p] bytes go to rank p, recv_bytes[p] come from rank p (so rank p's send_bytes[rank()]
  // must equal recv_bytes[p]); both buffers hold their peers' parts back to back in rank order (the
  // displacements are the prefix sums of the counts). Zero counts are allowed; send and recv must not
  // overlap.
  virtual void all_to_all(const void* send, std::span<const size_t> send_bytes, void* recv,
                          std::span<const size_t> recv_bytes) = 0;
  // Every rank's buf gets root's `bytes`.
  virtual void broadcast(void* buf, size_t bytes, int root) = 0;
  // Returns once every rank has reached it (and, on a device, finished the work queued before it).
  virtual void barrier() = 0;

  // This rank failed: the group's current and later collectives fail. The host implementations throw
  // `reason` on every rank; NCCL ends this rank's communicator and its peers' calls fail or time out.
  virtual void abort(const std::string& reason) noexcept = 0;

 protected:
  void check_counts(std::span<const size_t> send_bytes, std::span<const size_t> recv_bytes) const {
    const auto n = static_cast<size_t>(size());
    DSV4_CHECK(send_bytes.size() == n && recv_bytes.size() == n,
               "all_to_all on rank {}: {} send and {} recv counts for {} ranks", rank(), send_bytes.size(),
               recv_bytes.size(), n);
  }
  void check_root(int root) const {
    DSV4_CHECK(root >= 0 && root < size(), "broadcast from rank {} in a group of {}", root, size());
  }
};

}  // namespace dsv4
