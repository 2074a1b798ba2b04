// The KV host tier's page copies (Device::copy_many on CUDA): hundreds of independent layer pages of
// 400 B to 17 KB between pinned host memory and device memory, each a separate cudaMemcpyAsync today
// (about 1% of the link for a prefix's restore). Two ways to move a whole batch at once, measured
// against that one per page (gpu_kernels_bench kv-restore) before one becomes copy_many's:
// - page_copy_kernel: one launch, a CTA a page; the kernel reads and writes through unified addressing
//   (cudaHostAlloc's pinned pages are device-addressable), 16-byte accesses where a page allows, several
//   in flight a thread. The page list travels as the launch's parameters (no staging to outlive).
// - page_copy_batched: the driver's batched DMA, one cudaMemcpyBatchAsync (a descriptor a page), its
//   sources read in stream order.
#pragma once

#include <cuda_runtime_api.h>

#include <span>

#include "backend/device.h"

namespace dsv4::cuda {

// Pages a launch of the kernel takes (its parameters hold them); more run as further launches.
constexpr int kPageCopyMaxPages = 1024;

void page_copy_kernel(std::span<const Device::Copy> copies, cudaStream_t stream);
void page_copy_batched(std::span<const Device::Copy> copies, cudaStream_t stream);

}  // namespace dsv4::cuda
