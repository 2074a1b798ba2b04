// A copy that lands late, for tests of what a kernel reads before its wait on the previous one
// (launch.cuh): launched with programmatic dependent launch, it lets the next kernel begin at once,
// then spins, then writes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace dsv4::gputest {

// dst[0, bytes) = src[0, bytes) after about spin_us microseconds, on `stream` (4-byte words).
void late_copy(void* dst, const void* src, size_t bytes, int spin_us, cudaStream_t stream);

}  // namespace dsv4::gputest
