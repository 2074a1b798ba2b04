// HostCommunicator: the in-process Communicator of the CPU backend. Each rank is a thread holding its
// own HostCommunicator over one shared HostGroup; a collective meets its peers there and copies their
// data straight from their buffers (host memory), reducing in rank order in fp32.
#pragma once

#include <memory>
#include <string>

#include "backend/comm/communicator.h"
#include "backend/comm/host_group.h"

namespace dsv4 {

class HostCommunicator final : public Communicator {
 public:
  // `device` must hold host memory (HostDevice).
  HostCommunicator(std::shared_ptr<HostGroup> group, int rank, Device& device);
  ~HostCommunicator() override;  // leaves the group: peers waiting for this rank fail at once
  HostCommunicator(const HostCommunicator&) = delete;
  HostCommunicator& operator=(const HostCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  Device& device() override { return device_; }

  void all_gather(const void* send, void* recv, size_t bytes) override;
  void reduce_scatter(const void* send, void* recv, size_t count, DType type) override;
  void all_reduce(const void* send, void* recv, size_t count, DType type) override;
  void all_to_all(const void* send, std::span<const size_t> send_bytes, void* recv,
                  std::span<const size_t> recv_bytes) override;
  void broadcast(void* buf, size_t bytes, int root) override;
  void barrier() override;

  void abort(const std::string& reason) noexcept override;

 private:
  // Sums block `block` (count elements) of every rank's send into recv, after all ranks have read.
  void reduce(const CollectiveCall& call, size_t block, void* recv, size_t count);

  std::shared_ptr<HostGroup> group_;
  int rank_;
  Device& device_;
};

// One communicator for each rank of a new group of `size` (rank r at index r), all over `device`.
std::vector<std::unique_ptr<HostCommunicator>> make_host_communicators(int size, std::chrono::milliseconds timeout,
                                                                       Device& device);

}  // namespace dsv4
