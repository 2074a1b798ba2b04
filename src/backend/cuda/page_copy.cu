#include <algorithm>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/page_copy.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kInFlight = 4;  // 16-byte loads a thread issues before it stores them

// One launch's pages, by value in the kernel's parameters (20 bytes a page: within the 32 KB limit).
struct PageList {
  uint64_t dst[kPageCopyMaxPages];
  uint64_t src[kPageCopyMaxPages];
  uint32_t bytes[kPageCopyMaxPages];
  int count;
};

// Page i by CTA i: 16-byte vectors when the page's addresses and length allow (kInFlight loads a
// thread in flight, so a page read over the link waits out few round trips), else bytes.
__global__ void __launch_bounds__(kThreads) page_copy_kernel_impl(const PageList list) {
  pdl_enter();
  for (int i = static_cast<int>(blockIdx.x); i < list.count; i += static_cast<int>(gridDim.x)) {
    auto* dst = reinterpret_cast<uint8_t*>(list.dst[i]);
    const auto* src = reinterpret_cast<const uint8_t*>(list.src[i]);
    const uint32_t bytes = list.bytes[i];
    if (((list.dst[i] | list.src[i] | bytes) & 15u) != 0) {
      for (uint32_t b = threadIdx.x; b < bytes; b += kThreads) dst[b] = src[b];
      continue;
    }
    auto* d4 = reinterpret_cast<uint4*>(dst);
    const auto* s4 = reinterpret_cast<const uint4*>(src);
    const uint32_t n = bytes / 16;
    for (uint32_t v0 = threadIdx.x; v0 < n; v0 += kThreads * kInFlight) {
      uint4 v[kInFlight];
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {
        const uint32_t at = v0 + u * kThreads;
        if (at < n) v[u] = s4[at];
      }
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {
        const uint32_t at = v0 + u * kThreads;
        if (at < n) d4[at] = v[u];
      }
    }
  }
}

}  // namespace

void page_copy_kernel(std::span<const Device::Copy> copies, cudaStream_t stream) {
  for (size_t first = 0; first < copies.size(); first += kPageCopyMaxPages) {
    const size_t count = std::min<size_t>(kPageCopyMaxPages, copies.size() - first);
    PageList list;
    list.count = static_cast<int>(count);
    for (size_t i = 0; i < count; ++i) {
      const Device::Copy& c = copies[first + i];
      DSV4_CUDA_REQUIRE(c.bytes <= UINT32_MAX, "page copy: a page of more than 4 GiB");
      list.dst[i] = reinterpret_cast<uint64_t>(c.dst);
      list.src[i] = reinterpret_cast<uint64_t>(c.src);
      list.bytes[i] = static_cast<uint32_t>(c.bytes);
    }
    launch_kernel(page_copy_kernel_impl, static_cast<unsigned>(count), kThreads, 0, stream, list);
  }
}

}  // namespace dsv4::cuda
