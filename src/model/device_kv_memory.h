// KV pool memory from a backend's Device: GPU memory for the CUDA backend (zero-filled like the
// host pools), so the cache manager hands out device addresses without knowing it.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

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

// Copies that may run in any order as one Device::copy_many call when no two destinations overlap; in
// order otherwise (a host page written twice in one batch: the tier evicted and reused it).
inline void copy_batch(Device& dev, const std::vector<Device::Copy>& copies) {
  std::vector<Device::Copy> by_dst = copies;
  std::sort(by_dst.begin(), by_dst.end(), [](const auto& a, const auto& b) { return a.dst < b.dst; });
  for (size_t i = 1; i < by_dst.size(); ++i) {
    if (static_cast<std::byte*>(by_dst[i - 1].dst) + by_dst[i - 1].bytes > by_dst[i].dst) {
      for (const Device::Copy& c : copies) dev.copy(c.dst, c.src, c.bytes);
      return;
    }
  }
  dev.copy_many(copies);
}

// Host tier copies through the device: offloads on its main queue, in its order (they read a page after
// the last step that wrote it and before the next one rewrites it), then the batch's restores in the
// background (Device::begin_background), after those offloads and beside the following steps; the
// ticket tells the cache manager when a restored prefix may be read. Nothing on the host reads the host
// pages, so no copy is waited for.
class DeviceKvPageCopier final : public KvPageCopier {
 public:
  explicit DeviceKvPageCopier(Device& dev) : dev_(dev) {}
  uint64_t copy(std::span<const KvPageCopy> batch) override {
    std::vector<Device::Copy> offloads, restores;
    for (const KvPageCopy& c : batch) {
      (c.to_device ? restores : offloads).push_back({c.dst, c.src, static_cast<size_t>(c.bytes)});
    }
    copy_batch(dev_, offloads);
    if (restores.empty()) return 0;
    const auto t0 = std::chrono::steady_clock::now();
    dev_.begin_background();
    copy_batch(dev_, restores);
    const uint64_t ticket = dev_.end_background();
    if (ticket == 0) in_place_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return ticket;
  }
  bool landed(uint64_t ticket) override { return dev_.landed(ticket); }
  double restore_copy_seconds() const override { return in_place_seconds_ + dev_.background_seconds(); }

 private:
  Device& dev_;
  double in_place_seconds_ = 0;  // batches a device copied before end_background() returned
};

// Pool memory for a device: host mmap for host devices, device memory otherwise.
inline std::unique_ptr<KvMemoryAllocator> kv_memory_for(Device& dev) {
  if (dev.host_memory()) return std::make_unique<HostKvMemory>();
  return std::make_unique<DeviceKvMemory>(dev);
}

}  // namespace dsv4
