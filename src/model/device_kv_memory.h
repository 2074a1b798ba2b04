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

// Host tier copies as the device's copies, in its order: a restore lands before the next step's kernels
// read the pages, an offload reads them after the last step that wrote them, and a host page is only
// rewritten by a later copy of the same queue. Nothing on the host reads the host pages, so no copy is
// waited for (the step after a restore waits for its bytes on the GPU, not the engine thread).
class DeviceKvPageCopier final : public KvPageCopier {
 public:
  explicit DeviceKvPageCopier(Device& dev) : dev_(dev) {}
  void copy(std::span<const KvPageCopy> batch) override {
    for (const KvPageCopy& c : batch) dev_.copy(c.dst, c.src, static_cast<size_t>(c.bytes));
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
