// KV pool memory from a backend's Device: GPU memory for the CUDA backend (zero-filled like the
// host pools), so the cache manager hands out device addresses without knowing it.
#pragma once

#include <memory>

#include "backend/device.h"
#include "kv/kv_memory.h"
#include "kv/kv_page_copy.h"

namespace dsv4 {

class DeviceKvMemory final : public KvMemoryAllocator {
 public:
  explicit DeviceKvMemory(Device& dev) : dev_(dev) {}
  std::byte* allocate(size_t bytes) override {
    auto* p = static_cast<std::byte*>(dev_.allocate(bytes));
    dev_.fill_zero(p, bytes);
    return p;
  }
  void deallocate(std::byte* p, size_t) override { dev_.release(p); }

 private:
  Device& dev_;
};

// Host tier copies through the device's copy functions (synchronous; issue 33's CUDA slice moves a batch to
// the side queue with pinned host pages).
class DeviceKvPageCopier final : public KvPageCopier {
 public:
  explicit DeviceKvPageCopier(Device& dev) : dev_(dev) {}
  void copy(std::span<const KvPageCopy> batch) override {
    for (const KvPageCopy& c : batch) {
      const auto n = static_cast<size_t>(c.bytes);
      c.to_device ? dev_.to_device(c.dst, c.src, n) : dev_.to_host(c.dst, c.src, n);
    }
  }

 private:
  Device& dev_;
};

// Pool memory for a device: host mmap for host devices, device memory otherwise.
inline std::unique_ptr<KvMemoryAllocator> kv_memory_for(Device& dev) {
  if (dev.host_memory()) return std::make_unique<HostKvMemory>();
  return std::make_unique<DeviceKvMemory>(dev);
}

}  // namespace dsv4
