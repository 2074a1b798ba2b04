#include "model/device_page_map.h"

#include <algorithm>

#include "core/error.h"

namespace dsv4 {

DevicePageMap::DevicePageMap(Device& dev, const BlockPool& pool)
    : dev_(&dev), pool_(&pool), pages_(dev, std::max<size_t>(pool.page_lists().size(), 1)) {}

void DevicePageMap::copy(size_t begin, size_t end) {
  static_assert(sizeof(int32_t) == sizeof(uint32_t));  // pages are < 2^31 (BlockPool checks)
  if (begin < end)
    dev_->to_device(pages_.data() + begin, pool_->page_lists().data() + begin, (end - begin) * sizeof(int32_t));
  copied_ += static_cast<int64_t>(end - begin);
}

void DevicePageMap::sync() {
  const BlockPool::PageListChanges c = pool_->page_list_changes(synced_);
  synced_ = c.next;
  const size_t total = pool_->page_lists().size();
  if (fresh_ || c.all) {
    fresh_ = false;
    copy(0, total);
    return;
  }
  // One copy per run of neighbouring blocks: a prefill chunk's new blocks mostly come in id order.
  blocks_.assign(c.blocks.begin(), c.blocks.end());
  std::sort(blocks_.begin(), blocks_.end());
  blocks_.erase(std::unique(blocks_.begin(), blocks_.end()), blocks_.end());
  size_t run_begin = 0, run_end = 0;
  for (const uint32_t b : blocks_) {
    const std::span<const uint32_t> list = pool_->layer_pages(b);
    const auto at = static_cast<size_t>(list.data() - pool_->page_lists().data());
    if (at != run_end) {
      copy(run_begin, run_end);
      run_begin = at;
    }
    run_end = at + list.size();
  }
  copy(run_begin, run_end);
}

BlockPageMap DevicePageMap::layer_map(int unit, int layer) const {
  DSV4_CHECK(layer >= 0 && layer < pool_->unit_layers(unit), "page map: unit {} has no layer {}", unit, layer);
  BlockPageMap m;
  m.pages = pages_.data() + pool_->unit_page_offset(unit);
  m.first_block = static_cast<int32_t>(pool_->unit_first_block(unit));
  m.blocks = static_cast<int32_t>(pool_->unit_blocks(unit));
  m.layers = pool_->unit_layers(unit);
  m.layer = layer;
  return m;
}

}  // namespace dsv4
