// The KV host tier's page copies (Device::copy_many on CUDA): hundreds of independent layer pages of
// 400 B to 17 KB between pinned host memory and device memory in one launch, a CTA a page; the kernel
// reads and writes through unified addressing (cudaHostAlloc's pinned pages are device-addressable),
// 16-byte accesses where a page allows, several in flight a thread. The page list travels as the
// launch's parameters (no staging to outlive). Measured against a cudaMemcpyAsync a page and the
// driver's batched DMA (cudaMemcpyBatchAsync): 16 MB of 400 B / 4 KB / 17 KB pages in 0.51 / 0.36 /
// 0.36 ms against 100 / 10.3 / 2.7 ms and 42 / 5.6 / 2.3 ms, 89% of one contiguous copy at 4 KB and up
// (docs/perf.md); those two went.
#pragma once

#include <cuda_runtime_api.h>

#include <span>

#include "backend/device.h"

namespace dsv4::cuda {

// Pages a launch of the kernel takes (its parameters hold them); more run as further launches.
constexpr int kPageCopyMaxPages = 1024;

void page_copy_kernel(std::span<const Device::Copy> copies, cudaStream_t stream);

}  // namespace dsv4::cuda
