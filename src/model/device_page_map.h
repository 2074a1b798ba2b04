// DevicePageMap: a device copy of one BlockPool's page lists (which page each layer of a block uses),
// so that a step's block lists are mapped to each layer's pages where the ops run (paged_slots) and one
// list serves every layer of a unit. It lives at one address for the pool's life (recorded steps read
// it) and is brought up to date before each step by copying only the lists that changed since.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/device.h"
#include "backend/op_params.h"
#include "kv/block_pool.h"

namespace dsv4 {

class DevicePageMap {
 public:
  DevicePageMap(Device& dev, const BlockPool& pool);

  // Copies the page lists assigned since the last sync (every list the first time), in the device's
  // order: before any work issued after it, after any issued before it.
  void sync();

  // The map of one layer of the pool's local unit `unit`.
  BlockPageMap layer_map(int unit, int layer) const;
  const Device& device() const { return *dev_; }
  // Entries copied by the syncs so far (tests and benchmarks: what an incremental sync costs).
  int64_t copied_entries() const { return copied_; }

 private:
  void copy(size_t begin, size_t end);

  Device* dev_;
  const BlockPool* pool_;
  DeviceArray<int32_t> pages_;  // the pool's page_lists(), entry for entry
  uint64_t synced_ = 0;         // the pool's page-list changes copied so far
  bool fresh_ = true;           // nothing copied yet
  int64_t copied_ = 0;
  std::vector<uint32_t> blocks_;  // scratch: one sync's changed blocks, sorted
};

}  // namespace dsv4
