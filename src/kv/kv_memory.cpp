#include "kv/kv_memory.h"

#include <cstring>
#include <new>

#include "core/error.h"

namespace dsv4 {
namespace {
constexpr std::align_val_t kAlign{256};
}

std::byte* HostKvMemory::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  auto* p = static_cast<std::byte*>(::operator new(bytes, kAlign, std::nothrow));
  DSV4_CHECK(p != nullptr, "KV cache: cannot allocate {} bytes of host memory", bytes);
  std::memset(p, 0, bytes);
  return p;
}

void HostKvMemory::deallocate(std::byte* p, size_t /*bytes*/) {
  if (p != nullptr) ::operator delete(p, kAlign);
}

}  // namespace dsv4
