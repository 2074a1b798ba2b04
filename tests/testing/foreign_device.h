// Host memory posing as device memory, for the model's device path without a GPU (PlacedWeights copies
// the weights, the KV pools come from the device, logits are gathered with device copies).
#pragma once

#include <cstring>
#include <map>

#include "testing/host_backed_device.h"

namespace dsv4::testing {

// Host memory posing as device memory: fresh allocations are poisoned (0xFF: NaN in every float
// format) so that anything read before it is written shows, and every allocation is recorded.
class ForeignDevice final : public HostBackedDevice {
 public:
  explicit ForeignDevice(uint64_t capacity = uint64_t{1} << 34) : HostBackedDevice(false), capacity_(capacity) {}
  uint64_t memory_capacity() const override { return capacity_; }
  void* allocate(size_t bytes) override {
    void* p = host_.allocate(bytes);
    std::memset(p, 0xFF, bytes);
    blocks_[static_cast<const uint8_t*>(p)] = bytes;
    return p;
  }
  void release(void* p) override {
    blocks_.erase(static_cast<const uint8_t*>(p));
    host_.release(p);
  }

  bool owns(const void* p) const {
    const auto* b = static_cast<const uint8_t*>(p);
    auto it = blocks_.upper_bound(b);
    if (it == blocks_.begin()) return false;
    --it;
    return b < it->first + it->second;
  }

 private:
  uint64_t capacity_;
  std::map<const uint8_t*, size_t> blocks_;
};

}  // namespace dsv4::testing
