// Kernel launches with programmatic dependent launch (PDL, sm_90): a kernel may be scheduled while
// the kernel before it on the stream is still running, so its launch latency hides behind that
// kernel instead of adding to every step (a decode step is ~2,000 dependent launches).
//
// The contract: every kernel started through launch_kernel calls pdl_enter() before it touches global
// memory. pdl_enter waits until the previous grid has completed and its writes are visible, so each
// kernel still completes after all earlier work on its stream (the order is transitive), and only
// then lets the next kernel begin launching: one kernel of lookahead, never a pile of waiting grids.
// Launched without the attribute (a plain <<<>>> launch), pdl_enter costs nothing. Always on: measured
// faster at batch 1 and no slower at 8 and 32 (docs/perf-history.md, session 14).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "backend/cuda/cuda_check.h"

namespace dsv4::cuda {

#ifdef __CUDACC__
__device__ __forceinline__ void pdl_enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Before pdl_enter: pulls bytes [begin, begin + len) of `rows` rows, `stride` bytes apart, toward L2
// (whole CTA), so a weight's DRAM latency overlaps the previous kernel's tail. Only for data no kernel
// writes during a step (weights); a prefetch is a hint and cannot return stale data either way.
__device__ __forceinline__ void prefetch_rows_l2(const void* base, int64_t stride, int64_t rows, int64_t begin,
                                                 int64_t len) {
  const int64_t lines = (len + 127) / 128;
  const char* b = static_cast<const char*>(base) + begin;
  for (int64_t i = threadIdx.x; i < rows * lines; i += blockDim.x) {
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(b + i / lines * stride + i % lines * 128));
  }
}
#endif  // __CUDACC__

// Whether p sits on an n-byte boundary (vector loads and stores: a launcher's precondition).
inline bool aligned_to(const void* p, uintptr_t n) { return reinterpret_cast<uintptr_t>(p) % n == 0; }
inline bool aligned16(const void* p) { return aligned_to(p, 16); }

// Lets `kernel` launch with up to `bytes` of dynamic shared memory (past the default 48 KB, static and
// dynamic together, it needs the opt-in).
// The opt-in belongs to the current device's context, not the process: made once per device and
// kernel (and again to raise it), so ranks on several GPUs of one process each get it.
void allow_dynamic_smem(const void* kernel, size_t bytes);
template <typename... Params>
void allow_dynamic_smem(void (*kernel)(Params...), size_t bytes) {
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), bytes);
}

// kernel<<<grid, block, smem, stream>>>(args...) with the PDL attribute, in thread-block clusters of
// `cluster` CTAs along x where cluster > 1 (grid.x a multiple of it); launch errors throw at once.
template <typename... Params, typename... Args>
void launch_cluster_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, unsigned cluster, size_t smem,
                           cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attr[2]{};
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  attr[1].id = cudaLaunchAttributeClusterDimension;
  attr[1].val.clusterDim.x = cluster;
  attr[1].val.clusterDim.y = 1;
  attr[1].val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = cluster > 1 ? 2 : 1;
  DSV4_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}
template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
  launch_cluster_kernel(kernel, grid, block, 1, smem, stream, std::forward<Args>(args)...);
}

}  // namespace dsv4::cuda
