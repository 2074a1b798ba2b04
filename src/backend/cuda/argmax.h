// Greedy sampling on the device (backend/ops.h ArgmaxParams): the first maximum of each row.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace dsv4::cuda {

void argmax_rows(const float* x, int64_t rows, int64_t cols, int64_t limit, int32_t* out, cudaStream_t stream);

}  // namespace dsv4::cuda
