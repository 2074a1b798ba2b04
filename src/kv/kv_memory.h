// Where pool bytes come from. The manager asks an allocator for one region per pool and hands out
// addresses; it never reads or writes them. Host memory now, device memory later (another allocator).
#pragma once

#include <cstddef>
#include <cstdint>

namespace dsv4 {

class KvMemoryAllocator {
 public:
  virtual ~KvMemoryAllocator() = default;
  // A region of `bytes` bytes aligned to at least 256; throws dsv4::Error when it cannot.
  virtual std::byte* allocate(size_t bytes) = 0;
  virtual void deallocate(std::byte* p, size_t bytes) = 0;
};

// Zero-filled host memory.
class HostKvMemory final : public KvMemoryAllocator {
 public:
  std::byte* allocate(size_t bytes) override;
  void deallocate(std::byte* p, size_t bytes) override;
};

}  // namespace dsv4
