// Kept scratch: device memory the CUDA ops keep from call to call (the GEMM runners' activation and
// split-K buffers, the MoE buffers and expert pointer tables, RoPE tables). A recorded step bakes
// their addresses in, so every move of one bumps a process-wide epoch (CudaOps::scratch_epoch) and
// none may happen while the stream is being recorded: the warm-up step before a recording sizes them.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace dsv4::cuda {

uint64_t scratch_epoch();

// Call before kept scratch on `stream` is replaced or first made: throws while `stream` is being
// captured (the recording then fails and its step runs eagerly), else bumps the epoch.
void scratch_moves(cudaStream_t stream, const char* what);

// True while `stream` is being captured into a graph.
bool capturing(cudaStream_t stream);

}  // namespace dsv4::cuda
