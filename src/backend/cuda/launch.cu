#include <map>
#include <utility>

#include "backend/cuda/launch.cuh"

namespace dsv4::cuda {
void allow_dynamic_smem(const void* kernel, size_t bytes) {
  // Per thread, so a launch takes no lock; a thread meeting a (device, kernel) pair first sets it again,
  // which is harmless.
  thread_local std::map<std::pair<int, const void*>, size_t> allowed;
  int device = 0;
  DSV4_CUDA_CHECK(cudaGetDevice(&device));
  size_t& have = allowed[{device, kernel}];
  if (bytes <= have) return;
  DSV4_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  have = bytes;
}

}  // namespace dsv4::cuda
