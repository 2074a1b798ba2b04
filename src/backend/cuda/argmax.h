// Greedy sampling on the device (backend/op_params.h ArgmaxParams, device pointers): the first maximum
// of each row.
#pragma once

#include <cuda_runtime_api.h>

#include "backend/op_params.h"

namespace dsv4::cuda {

void argmax(const ArgmaxParams& p, cudaStream_t stream);

}  // namespace dsv4::cuda
