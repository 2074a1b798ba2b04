// DSV4_HOST_DEVICE marks a small inline function of a plain header that CUDA kernels call too: nvcc
// compiles it for both sides, the host compiler sees an ordinary inline function. Such headers stay
// free of fmt and of anything else nvcc cannot take.
#pragma once

#if defined(__CUDACC__)
#define DSV4_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define DSV4_HOST_DEVICE inline
#endif
