#include "backend/comm/staged_communicator.h"

#include <numeric>

#include "backend/comm/host_communicator.h"
#include "backend/comm/rank_order_sum.h"
#include "core/error.h"

namespace dsv4 {

StagedCommunicator::StagedCommunicator(Device& device, std::unique_ptr<Communicator> host)
    : device_(device), host_(std::move(host)) {
  DSV4_CHECK(host_ != nullptr && host_->device().host_memory(),
             "StagedCommunicator needs a communicator over host memory");
}

StagedCommunicator::StagedCommunicator(Device& device, std::shared_ptr<HostGroup> group, int rank)
    : device_(device), host_(std::make_unique<HostCommunicator>(std::move(group), rank, host_device_)) {}

std::byte* StagedCommunicator::stage_in(const void* src, size_t bytes) {
  in_.resize(bytes);
  if (bytes) device_.to_host(in_.data(), src, bytes);
  return in_.data();
}

std::byte* StagedCommunicator::out_buffer(size_t bytes) {
  out_.resize(bytes);
  return out_.data();
}

void StagedCommunicator::stage_out(void* dst, size_t bytes) {
  if (bytes) device_.to_device(dst, out_.data(), bytes);
}

void StagedCommunicator::all_gather(const void* send, void* recv, size_t bytes) {
  const size_t total = bytes * static_cast<size_t>(size());
  host_->all_gather(stage_in(send, bytes), out_buffer(total), bytes);
  stage_out(recv, total);
}

void StagedCommunicator::reduce_scatter(const void* send, void* recv, size_t count, DType type) {
  const size_t bytes = count * reduce_element_size(type);
  host_->reduce_scatter(stage_in(send, bytes * static_cast<size_t>(size())), out_buffer(bytes), count, type);
  stage_out(recv, bytes);
}

void StagedCommunicator::all_reduce(const void* send, void* recv, size_t count, DType type) {
  const size_t bytes = count * reduce_element_size(type);
  host_->all_reduce(stage_in(send, bytes), out_buffer(bytes), count, type);
  stage_out(recv, bytes);
}

void StagedCommunicator::all_to_all(const void* send, std::span<const size_t> send_bytes, void* recv,
                                    std::span<const size_t> recv_bytes) {
  check_counts(send_bytes, recv_bytes);
  const size_t sent = std::accumulate(send_bytes.begin(), send_bytes.end(), size_t{0});
  const size_t received = std::accumulate(recv_bytes.begin(), recv_bytes.end(), size_t{0});
  host_->all_to_all(stage_in(send, sent), send_bytes, out_buffer(received), recv_bytes);
  stage_out(recv, received);
}

void StagedCommunicator::broadcast(void* buf, size_t bytes, int root) {
  check_root(root);
  const bool from_here = rank() == root;  // only the root's bytes travel
  host_->broadcast(from_here ? stage_in(buf, bytes) : out_buffer(bytes), bytes, root);
  if (!from_here) stage_out(buf, bytes);
}

void StagedCommunicator::barrier() {
  device_.synchronize();
  host_->barrier();
}

std::vector<std::unique_ptr<StagedCommunicator>> make_staged_communicators(const std::vector<Device*>& devices,
                                                                           std::chrono::milliseconds timeout) {
  auto group = std::make_shared<HostGroup>(static_cast<int>(devices.size()), timeout);
  std::vector<std::unique_ptr<StagedCommunicator>> comms;
  for (size_t r = 0; r < devices.size(); ++r) {
    comms.push_back(std::make_unique<StagedCommunicator>(*devices[r], group, static_cast<int>(r)));
  }
  return comms;
}

}  // namespace dsv4
