// NcclCommunicator: the Communicator of ranks on distinct GPUs, through NCCL (loaded at run time,
// nccl_library.h). Each collective is enqueued on the CudaDevice's current stream, so it orders with the
// model's kernels and can be recorded into a CUDA graph. The communicator is non-blocking inside NCCL:
// joining and every call wait at most `timeout` for NCCL, then abort the communicator with an error
// (a peer that never joins fails every rank that did, never hangs it). NVLink multicast stays off.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "backend/comm/communicator.h"
#include "backend/comm/rendezvous.h"
#include "backend/cuda/cuda_device.h"

struct ncclComm;

namespace dsv4::cuda {

class NcclCommunicator final : public Communicator {
 public:
  // ncclUniqueId's bytes: rank 0 makes one, the rendezvous (backend/comm/rendezvous.h) hands it out.
  using UniqueId = std::array<std::byte, 128>;
  static UniqueId make_unique_id();
  // The usual way in: rank 0 makes the id, the TCP rendezvous hands it out, every rank joins.
  static std::unique_ptr<NcclCommunicator> join(CudaDevice& device, const RendezvousOptions& options);

  // Joins as `rank` of `size` on device's GPU; returns once every rank has joined.
  NcclCommunicator(CudaDevice& device, const UniqueId& id, int rank, int size, std::chrono::milliseconds timeout);
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

  // Ends the communicator at once (ncclCommAbort); later calls on this rank throw `reason`.
  void abort(const std::string& reason) noexcept override;

 private:
  // Checks an NCCL result, first waiting out "in progress" up to the timeout (then aborting).
  void settle(int result, const char* what);
  ncclComm* live(const char* what) const;

  CudaDevice& device_;
  int rank_, size_;
  std::chrono::milliseconds timeout_;
  ncclComm* comm_ = nullptr;
  std::string aborted_;     // why comm_ was ended early
  float* token_ = nullptr;  // what barrier() sums
};

}  // namespace dsv4::cuda
