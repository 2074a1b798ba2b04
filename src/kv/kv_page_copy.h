// Copies of whole layer pages between the device pools and the host tier (kv/host_tier.h). The cache
// manager only says which bytes go where; whoever owns the device issues them (model/device_kv_memory.h
// over a backend's Device), so kv/ stays free of backends.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace dsv4 {

struct KvPageCopy {
  std::byte* dst = nullptr;
  const std::byte* src = nullptr;
  int64_t bytes = 0;
  bool to_device = false;  // host tier -> pool (a restore); else pool -> host tier (an offload)
};

// Joins consecutive copies of one direction whose destinations and sources both continue the previous
// copy's into one copy (a block's layer pages often lie side by side in both tiers): fewer, larger copies
// (on a GPU each is a call). Order is kept; a joined copy moves exactly the bytes of its parts.
inline void coalesce(std::vector<KvPageCopy>& batch) {
  size_t out = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (out > 0) {
      KvPageCopy& last = batch[out - 1];
      const KvPageCopy& c = batch[i];
      if (c.to_device == last.to_device && c.dst == last.dst + last.bytes && c.src == last.src + last.bytes) {
        last.bytes += c.bytes;
        continue;
      }
    }
    batch[out++] = batch[i];
  }
  batch.resize(out);
}

class KvPageCopier {
 public:
  virtual ~KvPageCopier() = default;
  // Runs a batch (an offload out of a page comes before a restore into the same page). Offloads are in
  // place for whatever the device runs next (its own queue may still hold them). Restores may run in the
  // background: the ticket returned (0: none outstanding) says when they have landed, and until then the
  // caller neither reads their pages nor reuses their host pages.
  virtual uint64_t copy(std::span<const KvPageCopy> batch) = 0;
  // Whether the restores of `ticket` (and of every earlier one) have landed; never waits.
  virtual bool landed(uint64_t ticket) { return ticket == 0; }
  // The time the restores seen landed took to copy, summed: from a batch's first byte moving to its last
  // (on a GPU the copy queue's own time, apart from when anyone looks), so restore bytes over it is the
  // restores' bandwidth against the link's.
  virtual double restore_copy_seconds() const { return 0; }
};

// Pools in host memory (the CPU backend, tests).
class MemcpyKvPageCopier final : public KvPageCopier {
 public:
  uint64_t copy(std::span<const KvPageCopy> batch) override {
    // Offloads first, then restores (as a device's copier orders them), so the restores are timed apart.
    for (const KvPageCopy& c : batch) {
      if (!c.to_device) std::memcpy(c.dst, c.src, static_cast<size_t>(c.bytes));
    }
    const auto t0 = std::chrono::steady_clock::now();
    bool restores = false;
    for (const KvPageCopy& c : batch) {
      if (c.to_device) std::memcpy(c.dst, c.src, static_cast<size_t>(c.bytes));
      restores |= c.to_device;
    }
    if (restores) seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return 0;
  }
  double restore_copy_seconds() const override { return seconds_; }

 private:
  double seconds_ = 0;
};

}  // namespace dsv4
