// DeviceBlockTables: the block tables of one full unit (kv_layout.h) for the requests of a step, kept
// on the device from step to step, one row a request. A full unit's table only grows while its
// request lives, so a sync copies just the blocks a request gained since the last one: a decode step
// uploads O(batch) instead of O(batch x blocks). Rows are reused once their request is gone; growing
// the storage moves it (recorded steps that baked the old address go stale: StepGraphs checks).
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "backend/device.h"
#include "kv/kv_cache_manager.h"

namespace dsv4 {

class DeviceBlockTables {
 public:
  DeviceBlockTables(Device& dev, const KvCacheManager& mgr, int unit);

  // Brings the rows of `requests` (live ones, each once) up to date, in the device's order; rows of
  // requests not among them are freed.
  void sync(std::span<const KvRequestId> requests);
  // The row of a request synced last time.
  int32_t row(KvRequestId id) const;

  const int32_t* data() const { return table_.data(); }
  int64_t rows() const { return rows_; }
  int32_t stride() const { return stride_; }
  const Device& device() const { return *dev_; }
  // Block ids copied by the syncs so far (tests: what a sync costs).
  int64_t copied_blocks() const { return copied_; }

 private:
  struct Row {
    int32_t index = -1;
    uint64_t serial = 0;
    size_t blocks = 0;   // on the device
    uint64_t stamp = 0;  // the last sync that listed it
  };
  void reserve(int64_t rows, int64_t stride);
  void release_others(std::span<const KvRequestId> requests);
  void append_new_blocks(KvRequestId id);

  Device* dev_;
  const KvCacheManager* mgr_;
  int unit_;
  DeviceArray<int32_t> table_;  // [rows_, stride_]
  int64_t rows_ = 0;
  int32_t stride_ = 0;
  std::unordered_map<KvRequestId, Row> of_;
  std::vector<int32_t> free_rows_;
  int64_t copied_ = 0;
  uint64_t stamp_ = 0;
};

}  // namespace dsv4
