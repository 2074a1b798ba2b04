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

// The host tier's pages: pinned host memory of the device (staging-free copies on a GPU; plain memory
// for host devices, whose pools are host memory too).
class PinnedKvMemory final : public KvMemoryAllocator {
 public:
  explicit PinnedKvMemory(Device& dev) : dev_(dev) {}
  std::byte* allocate(size_t bytes) override { return static_cast<std::byte*>(dev_.allocate_pinned(bytes)); }
  void deallocate(std::byte* p, size_t) override { dev_.release_pinned(p); }

 private:
  Device& dev_;
};

// Host tier copies through the device: offloads on its main queue, in its order (they read a page after
// the last step that wrote it and before the next one rewrites it), then the batch's restores in the
// background (Device::begin_background), after those offloads and beside the following steps; the
// ticket tells the cache manager when a restored prefix may be read. Nothing on the host reads the host
// pages, so no copy is waited for.
class DeviceKvPageCopier final : public KvPageCopier {
 public:
  explicit DeviceKvPageCopier(Device& dev) : dev_(dev) {}
  uint64_t copy(std::span<const KvPageCopy> batch) override {
    bool restores = false;
    for (const KvPageCopy& c : batch) {
      if (c.to_device) {
        restores = true;
      } else {
        dev_.copy(c.dst, c.src, static_cast<size_t>(c.bytes));
      }
    }
    if (!restores) return 0;
    dev_.begin_background();
    for (const KvPageCopy& c : batch) {
      if (c.to_device) dev_.copy(c.dst, c.src, static_cast<size_t>(c.bytes));
    }
    return dev_.end_background();
  }
  bool landed(uint64_t ticket) override { return dev_.landed(ticket); }

 private:
  Device& dev_;
};

// Pool memory for a device: host mmap for host devices, device memory otherwise.
inline std::unique_ptr<KvMemoryAllocator> kv_memory_for(Device& dev) {
  if (dev.host_memory()) return std::make_unique<HostKvMemory>();
  return std::make_unique<DeviceKvMemory>(dev);
}

}  // namespace dsv4
