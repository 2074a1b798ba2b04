// StagedCommunicator: collectives on any Device through a host communicator: each copies its device
// inputs to host memory, runs the host collective, and copies the result back on the device's queue.
// Several ranks (threads, each with its own Device and stream) can so share one GPU, which lets one GPU
// test the sharded CUDA path; NCCL wants one GPU a rank. The copies to the host wait for the device's
// earlier work, so it cannot be recorded into a CUDA graph (the device refuses).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "backend/comm/communicator.h"
#include "backend/comm/host_group.h"

namespace dsv4 {

class StagedCommunicator final : public Communicator {
 public:
  // `host` works on host memory (a HostCommunicator); its rank and size are this one's.
  StagedCommunicator(Device& device, std::unique_ptr<Communicator> host);
  // Rank `rank` of `group`, through a HostCommunicator of its own.
  StagedCommunicator(Device& device, std::shared_ptr<HostGroup> group, int rank);

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  Device& device() override { return device_; }
  Communicator& host() { return *host_; }

  void all_gather(const void* send, void* recv, size_t bytes) override;
  void reduce_scatter(const void* send, void* recv, size_t count, DType type) override;
  void all_reduce(const void* send, void* recv, size_t count, DType type) override;
  void all_to_all(const void* send, std::span<const size_t> send_bytes, void* recv,
                  std::span<const size_t> recv_bytes) override;
  void broadcast(void* buf, size_t bytes, int root) override;
  void barrier() override;
  void abort(const std::string& reason) noexcept override { host_->abort(reason); }

 private:
  // The device's bytes in host buffer `in_` (resized to `bytes`); returns its data.
  std::byte* stage_in(const void* src, size_t bytes);
  std::byte* out_buffer(size_t bytes);
  void stage_out(void* dst, size_t bytes);  // out_ to the device

  Device& device_;
  HostDevice host_device_;  // the staging's side, for a HostCommunicator made here
  std::unique_ptr<Communicator> host_;
  std::vector<std::byte> in_, out_;  // host staging, kept between calls
};

// One communicator for each of `devices` (rank r on devices[r]) over a new host group.
std::vector<std::unique_ptr<StagedCommunicator>> make_staged_communicators(const std::vector<Device*>& devices,
                                                                           std::chrono::milliseconds timeout);

}  // namespace dsv4
