// Checking every CUDA runtime call: failures become dsv4::Error with the call site.
// Usable from .cu files (no fmt here: nvcc cannot compile fmt's compile-time format checks).
#pragma once

#include <cuda_runtime_api.h>

#include <string>

namespace dsv4::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* file, int line, const char* expr);
[[noreturn]] void throw_error(const std::string& message);

}  // namespace dsv4::cuda

#define DSV4_CUDA_CHECK(expr)                                                                           \
  do {                                                                                                  \
    const cudaError_t dsv4_err_ = (expr);                                                               \
    if (dsv4_err_ != cudaSuccess) ::dsv4::cuda::throw_cuda_error(dsv4_err_, __FILE__, __LINE__, #expr); \
  } while (0)

// After a kernel launch: reports launch-configuration errors at once.
#define DSV4_CUDA_CHECK_LAUNCH() DSV4_CUDA_CHECK(cudaGetLastError())

// Argument checks inside .cu host code.
#define DSV4_CUDA_REQUIRE(cond, message)                          \
  do {                                                            \
    if (!(cond)) ::dsv4::cuda::throw_error(std::string(message)); \
  } while (0)
