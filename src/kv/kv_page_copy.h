// Copies of whole layer pages between the device pools and the host tier (kv/host_tier.h). The cache
// manager only says which bytes go where; whoever owns the device issues them (model/device_kv_memory.h
// over a backend's Device), so kv/ stays free of backends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace dsv4 {

struct KvPageCopy {
  std::byte* dst = nullptr;
  const std::byte* src = nullptr;
  int64_t bytes = 0;
  bool to_device = false;  // host tier -> pool (a restore); else pool -> host tier (an offload)
};

class KvPageCopier {
 public:
  virtual ~KvPageCopier() = default;
  // Runs a batch in order (an offload out of a page comes before a restore into the same page): when it
  // returns, the bytes are in place for whatever the device runs next (its own queue may still hold the
  // copies). One call per batch, so that a copier may move the batch to a side queue.
  virtual void copy(std::span<const KvPageCopy> batch) = 0;
};

// Pools in host memory (the CPU backend, tests).
class MemcpyKvPageCopier final : public KvPageCopier {
 public:
  void copy(std::span<const KvPageCopy> batch) override {
    for (const KvPageCopy& c : batch) std::memcpy(c.dst, c.src, static_cast<size_t>(c.bytes));
  }
};

}  // namespace dsv4
