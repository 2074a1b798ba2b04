#include "model/shard_exchange.h"

#include "core/error.h"

namespace dsv4 {
namespace {

std::vector<size_t> bytes_of(std::span<const int64_t> counts, size_t width) {
  std::vector<size_t> b;
  for (int64_t c : counts) b.push_back(static_cast<size_t>(c) * width);
  return b;
}

}  // namespace

Communicator& ShardExchange::tp_comm() const {
  DSV4_CHECK(shard_.tp && shard_.tp->size() == tp(), "sharded model: rank {} has no communicator of its {} TP ranks",
             shard_.rank, tp());
  return *shard_.tp;
}

Communicator& ShardExchange::world_comm() const {
  const int world = shard_.layout.config.world();
  DSV4_CHECK(shard_.world && shard_.world->size() == world,
             "sharded model: rank {} has no communicator of all {} ranks", shard_.rank, world);
  return *shard_.world;
}

void ShardExchange::gather_columns(const void* local, int64_t rows, size_t width, void* full) {
  const auto n = static_cast<size_t>(rows);
  if (tp() == 1) return dev_.copy(full, local, n * width);
  DeviceArray<uint8_t> all(dev_, std::max<size_t>(static_cast<size_t>(tp()) * n * width, 1));
  tp_comm().all_gather(local, all.data(), n * width);
  const size_t pitch = static_cast<size_t>(tp()) * width;
  for (int r = 0; r < tp(); ++r)
    dev_.copy_2d(static_cast<uint8_t*>(full) + static_cast<size_t>(r) * width, pitch,
                 all.data() + static_cast<size_t>(r) * n * width, width, width, n);
}

void ShardExchange::gather_rows(const void* local, int64_t rows, size_t width, void* full) {
  const size_t bytes = static_cast<size_t>(rows) * width;
  if (tp() == 1) return dev_.copy(full, local, bytes);
  tp_comm().all_gather(local, full, bytes);
}

std::vector<int64_t> ShardExchange::exchange_counts(std::span<const int64_t> send_counts) {
  Communicator& c = world_comm();
  const auto world = static_cast<size_t>(c.size());
  DSV4_CHECK(send_counts.size() == world, "expert dispatch: {} counts for {} ranks", send_counts.size(), world);
  DeviceArray<int64_t> mine(dev_, std::vector<int64_t>(send_counts.begin(), send_counts.end()));
  DeviceArray<int64_t> theirs(dev_, world);
  const std::vector<size_t> one(world, sizeof(int64_t));
  c.all_to_all(mine.data(), one, theirs.data(), one);
  return theirs.to_host();
}

void ShardExchange::exchange_rows(const void* rows, std::span<const int64_t> send_counts,
                                  std::span<const int64_t> recv_counts, size_t width, void* out) {
  world_comm().all_to_all(rows, bytes_of(send_counts, width), out, bytes_of(recv_counts, width));
}

}  // namespace dsv4
