// ShardExchange: the collectives a sharded model runs between its layers, all gathers (the exact tier
// never sums across ranks): a rank's columns of an activation into whole rows, a rank's rows into the
// replica's rows, and expert parallelism's exchange of routed rows with the ranks owning their experts.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/device.h"
#include "model/model_shard.h"

namespace dsv4 {

class ShardExchange {
 public:
  ShardExchange(Device& dev, const ModelShard& shard) : dev_(dev), shard_(shard) {}

  int tp() const { return shard_.layout.config.tp; }
  int tp_rank() const { return shard_.layout.place(shard_.rank).tp_rank; }

  // full [rows, tp x width] from each TP rank's local [rows, width] (width in bytes), rank r's columns
  // r x width onward.
  void gather_columns(const void* local, int64_t rows, size_t width, void* full);
  // full [tp x rows] rows from each TP rank's `rows` rows of `width` bytes, rank-major.
  void gather_rows(const void* local, int64_t rows, size_t width, void* full);

  // Expert parallelism: each rank says how many rows it sends each rank; returns how many each sends here.
  std::vector<int64_t> exchange_counts(std::span<const int64_t> send_counts);
  // Rows of `width` bytes, rank-major blocks of send_counts rows, to those ranks; out gets the rows sent
  // here, rank-major blocks of recv_counts rows (exchange_counts' answer, or the way back: the swap).
  void exchange_rows(const void* rows, std::span<const int64_t> send_counts, std::span<const int64_t> recv_counts,
                     size_t width, void* out);

 private:
  Communicator& tp_comm() const;
  Communicator& world_comm() const;

  Device& dev_;
  const ModelShard& shard_;
};

}  // namespace dsv4
