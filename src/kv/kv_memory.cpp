#include "kv/kv_memory.h"

#include <sys/mman.h>

#include <cstring>
#include <new>

#include "core/error.h"

namespace dsv4 {

// Anonymous mmap: page-aligned, zeroed by the kernel on first touch, so a large budget costs
// nothing until the cache fills (a memset would touch every page at startup).
std::byte* HostKvMemory::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  DSV4_CHECK(p != MAP_FAILED, "KV cache: cannot allocate {} bytes of host memory", bytes);
  return static_cast<std::byte*>(p);
}

void HostKvMemory::deallocate(std::byte* p, size_t bytes) {
  if (p != nullptr) ::munmap(p, bytes);
}

}  // namespace dsv4
