#include "backend/comm/host_communicator.h"

#include <fmt/format.h>

#include <cstring>
#include <vector>

#include "backend/comm/rank_order_sum.h"
#include "core/error.h"

namespace dsv4 {

namespace {

const std::byte* at(const void* p, size_t offset) { return static_cast<const std::byte*>(p) + offset; }
std::byte* at(void* p, size_t offset) { return static_cast<std::byte*>(p) + offset; }

void copy_bytes(void* dst, const void* src, size_t bytes) {
  if (bytes && dst != src) std::memcpy(dst, src, bytes);
}

}  // namespace

HostCommunicator::HostCommunicator(std::shared_ptr<HostGroup> group, int rank, Device& device)
    : group_(std::move(group)), rank_(rank), device_(device) {
  DSV4_CHECK(group_ != nullptr, "HostCommunicator needs a group");
  DSV4_CHECK(rank >= 0 && rank < group_->size(), "rank {} is outside a host group of {}", rank, group_->size());
  DSV4_CHECK(device.host_memory(),
             "HostCommunicator needs a device with host memory (StagedCommunicator stages others)");
}

HostCommunicator::~HostCommunicator() { group_->leave(rank_); }

void HostCommunicator::abort(const std::string& reason) noexcept {
  group_->abort(fmt::format("HostCommunicator: rank {} failed: {}", rank_, reason));
}

void HostCommunicator::all_gather(const void* send, void* recv, size_t bytes) {
  const uint64_t seq = group_->enter(rank_, {.name = "all_gather", .bytes = bytes, .send = send, .recv = recv});
  for (int p = 0; p < size(); ++p) copy_bytes(at(recv, static_cast<size_t>(p) * bytes), group_->call(p).send, bytes);
  group_->done(rank_, seq);
}

void HostCommunicator::reduce(const CollectiveCall& call, size_t block, void* recv, size_t count) {
  const uint64_t seq = group_->enter(rank_, call);
  const size_t bytes = count * reduce_element_size(call.type);
  std::vector<const void*> in(static_cast<size_t>(size()));
  for (int p = 0; p < size(); ++p) in[static_cast<size_t>(p)] = at(group_->call(p).send, block * bytes);
  std::vector<std::byte> sum(bytes);
  rank_order_sum(in, sum.data(), count, call.type);
  group_->done(rank_, seq);  // recv may be a send buffer a peer reads: written only after everyone has read
  copy_bytes(recv, sum.data(), bytes);
}

void HostCommunicator::reduce_scatter(const void* send, void* recv, size_t count, DType type) {
  const size_t bytes = count * reduce_element_size(type);
  reduce({.name = "reduce_scatter", .bytes = bytes, .type = type, .send = send, .recv = recv},
         static_cast<size_t>(rank_), recv, count);
}

void HostCommunicator::all_reduce(const void* send, void* recv, size_t count, DType type) {
  const size_t bytes = count * reduce_element_size(type);
  reduce({.name = "all_reduce", .bytes = bytes, .type = type, .send = send, .recv = recv}, 0, recv, count);
}

namespace {

// Where rank `to`'s part starts in a buffer laid out by `counts`.
size_t offset_of(std::span<const size_t> counts, int to) {
  size_t off = 0;
  for (int p = 0; p < to; ++p) off += counts[static_cast<size_t>(p)];
  return off;
}

}  // namespace

void HostCommunicator::all_to_all(const void* send, std::span<const size_t> send_bytes, void* recv,
                                  std::span<const size_t> recv_bytes) {
  check_counts(send_bytes, recv_bytes);
  const uint64_t seq = group_->enter(
      rank_, {.name = "all_to_all", .send_bytes = send_bytes, .recv_bytes = recv_bytes, .send = send, .recv = recv});
  for (int p = 0; p < size(); ++p) {
    const CollectiveCall& peer = group_->call(p);
    copy_bytes(at(recv, offset_of(recv_bytes, p)), at(peer.send, offset_of(peer.send_bytes, rank_)),
               recv_bytes[static_cast<size_t>(p)]);
  }
  group_->done(rank_, seq);
}

void HostCommunicator::broadcast(void* buf, size_t bytes, int root) {
  check_root(root);
  const uint64_t seq =
      group_->enter(rank_, {.name = "broadcast", .bytes = bytes, .root = root, .send = buf, .recv = buf});
  copy_bytes(buf, group_->call(root).send, bytes);
  group_->done(rank_, seq);
}

void HostCommunicator::barrier() { group_->done(rank_, group_->enter(rank_, {.name = "barrier"})); }

std::vector<std::unique_ptr<HostCommunicator>> make_host_communicators(int size, std::chrono::milliseconds timeout,
                                                                       Device& device) {
  auto group = std::make_shared<HostGroup>(size, timeout);
  std::vector<std::unique_ptr<HostCommunicator>> comms;
  for (int r = 0; r < size; ++r) comms.push_back(std::make_unique<HostCommunicator>(group, r, device));
  return comms;
}

}  // namespace dsv4
