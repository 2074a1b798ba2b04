// NcclCommunicator: the Communicator of ranks on distinct GPUs, through NCCL (loaded at run time,
// nccl_library.h). Each collective is enqueued on the CudaDevice's current stream, so it orders with the
// model's kernels and can be recorded into a CUDA graph. The communicator is non-blocking inside NCCL:
// joining and every call wait at most `timeout` for NCCL, then abort the communicator with an error
// (a peer that never joins fails every rank that did, never hangs it), and a watchdog aborts it when
// a collective has not finished within `timeout` (a peer that died). NVLink multicast stays off.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>

#include "backend/comm/communicator.h"
#include "backend/comm/rendezvous.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/nccl_watchdog.h"

struct ncclComm;

namespace dsv4::cuda {

class NcclCommunicator final : public Communicator {
 public:
  // ncclUniqueId's bytes: rank 0 makes one, the rendezvous (backend/comm/rendezvous.h) hands it out.
  using UniqueId = std::array<std::byte, 128>;
  static UniqueId make_unique_id();
  // The usual way in: rank 0 makes the id, the TCP rendezvous hands it out, every rank joins.
  static std::unique_ptr<NcclCommunicator> join(CudaDevice& device, const RendezvousOptions& options);

  // kNow: the constructor returns once every rank has joined. kAtFirstCollective: the rank joins at its
  // first collective, where its peers meet it anyway, so ranks can be made one after another on any
  // thread (an engine's replicas); an abort before then fails that join and every later call.
  enum class Join : uint8_t { kNow, kAtFirstCollective };
  // Joins as `rank` of `size` on device's GPU.
  NcclCommunicator(CudaDevice& device, const UniqueId& id, int rank, int size, std::chrono::milliseconds timeout,
                   Join when = Join::kNow);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device& device() override { return device_; }

  void all_gather(const void* send, void* recv, size_t bytes) override;
  void reduce_scatter(const void* send, void* recv, size_t count, DType type) override;
  void all_reduce(const void* send, void* recv, size_t count, DType type) override;
  void all_to_all(const void* send, std::span<const size_t> send_bytes, void* recv,
                  std::span<const size_t> recv_bytes) override;
  void broadcast(void* buf, size_t bytes, int root) override;
  void barrier() override;

  // Ends the communicator at once (ncclCommAbort); later calls on this rank throw `reason`, and what the
  // collectives in flight wrote is undefined. Thread-safe: the watchdog calls it when one is overdue.
  void abort(const std::string& reason) noexcept override;

 private:
  // Under mu_: runs call(comm, stream) (its NCCL calls each settle()d), then has the watchdog follow it.
  template <typename Call>
  void enqueue(const char* what, Call&& call);
  // Checks an NCCL result, first waiting out "in progress" up to the timeout (then aborting).
  void settle(int result, const char* what);
  void abort_locked(const std::string& reason) noexcept;
  void join_locked();  // ncclCommInitRank and the watchdog
  void throw_if_aborted(const char* what) const;
  std::string async_error();  // "" or what NCCL reports

  CudaDevice& device_;
  int rank_, size_;
  std::chrono::milliseconds timeout_;
  std::mutex mu_;  // comm_ and aborted_: the watchdog's thread may abort
  ncclComm* comm_ = nullptr;
  UniqueId id_{};
  bool joined_ = false;
  std::string aborted_;     // why comm_ was ended early
  float* token_ = nullptr;  // what barrier() sums
  std::unique_ptr<NcclWatchdog> watchdog_;
};

}  // namespace dsv4::cuda
