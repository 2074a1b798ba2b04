#include "model/device_block_tables.h"

#include <algorithm>

#include "core/error.h"

namespace dsv4 {

DeviceBlockTables::DeviceBlockTables(Device& dev, const KvCacheManager& mgr, int unit)
    : dev_(&dev), mgr_(&mgr), unit_(unit) {
  const KvUnit& u = mgr.layout().units.at(static_cast<size_t>(unit));
  DSV4_CHECK(!u.sliding(), "device block tables: unit {} slides (its tables are not append-only)", u.name);
}

// Room for `rows` rows of `stride` blocks; a move forgets every row (they are copied again).
void DeviceBlockTables::reserve(int64_t rows, int64_t stride) {
  if (rows <= rows_ && stride <= stride_) return;
  rows_ = std::max<int64_t>({rows, rows_ * 2, 8});
  stride_ = static_cast<int32_t>(std::max<int64_t>({stride, int64_t{stride_} * 2, 64}));
  table_ = DeviceArray<int32_t>(*dev_, static_cast<size_t>(rows_ * stride_));
  of_.clear();
  free_rows_.clear();
  for (auto r = static_cast<int32_t>(rows_); r-- > 0;) free_rows_.push_back(r);
}

void DeviceBlockTables::release_others(std::span<const KvRequestId> requests) {
  ++stamp_;
  for (const KvRequestId id : requests)
    if (const auto it = of_.find(id); it != of_.end()) it->second.stamp = stamp_;
  for (auto it = of_.begin(); it != of_.end();) {
    if (it->second.stamp == stamp_) {
      ++it;
      continue;
    }
    free_rows_.push_back(it->second.index);
    it = of_.erase(it);
  }
}

void DeviceBlockTables::sync(std::span<const KvRequestId> requests) {
  release_others(requests);
  int64_t widest = 0;
  for (const KvRequestId id : requests)
    widest = std::max(widest, static_cast<int64_t>(mgr_->block_table(id, unit_).blocks.size()));
  reserve(static_cast<int64_t>(requests.size()), widest);
  for (const KvRequestId id : requests) append_new_blocks(id);
}

// The blocks the request's table gained since its row was last synced (all of a new table's).
void DeviceBlockTables::append_new_blocks(KvRequestId id) {
  const KvBlockTable t = mgr_->block_table(id, unit_);
  DSV4_CHECK(t.first_page == 0, "device block tables: request {}'s table of unit {} does not start at 0", id, unit_);
  auto [it, fresh] = of_.try_emplace(id);
  Row& r = it->second;
  if (fresh) {
    DSV4_CHECK(!free_rows_.empty(), "device block tables: no free row for request {}", id);
    r.index = free_rows_.back();
    free_rows_.pop_back();
  }
  const uint64_t serial = mgr_->request_serial(id);
  if (r.serial != serial || r.blocks > t.blocks.size()) r = {r.index, serial, 0, stamp_};  // a new table
  const size_t n = t.blocks.size() - r.blocks;
  if (n > 0)
    dev_->to_device(table_.data() + int64_t{r.index} * stride_ + static_cast<int64_t>(r.blocks),
                    t.blocks.data() + r.blocks, n * sizeof(int32_t));  // block ids < 2^31 (BlockPool)
  r.blocks = t.blocks.size();
  copied_ += static_cast<int64_t>(n);
}

int32_t DeviceBlockTables::row(KvRequestId id) const {
  const auto it = of_.find(id);
  DSV4_CHECK(it != of_.end(), "device block tables: request {} was not synced", id);
  return it->second.index;
}

}  // namespace dsv4
