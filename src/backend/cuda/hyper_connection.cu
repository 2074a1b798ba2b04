#include <cuda_bf16.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/hyper_connection.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxHc = 8;
constexpr int kMaxMix = (2 + kMaxHc) * kMaxHc;

__device__ __forceinline__ float sigmoidf(float v) { return 1.0f / (1.0f + expf(-v)); }

// Block reduction of `n` partial sums per thread (each thread's values in `v`); results in out[0..n).
template <int N>
__device__ void block_sums(float (&v)[N], int n, float* out) {
  __shared__ float part[kThreads / 32][kMaxMix + 1];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int i = 0; i < n; ++i) {
    float s = v[i];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) part[warp][i] = s;
  }
  __syncthreads();
  if (threadIdx.x < n) {
    float s = 0;
    for (int w = 0; w < kThreads / 32; ++w) s += part[w][threadIdx.x];
    out[threadIdx.x] = s;
  }
  __syncthreads();
}

// mix = (X fn^T) * rs for one token (block): the rows of fn and the sum of squares in one pass.
__device__ void token_mix(const uint16_t* X, int64_t width, const float* fn, int mix, float eps, float* out) {
  float acc[kMaxMix + 1];
  for (int i = 0; i <= mix; ++i) acc[i] = 0;
  for (int64_t c = threadIdx.x; c < width; c += blockDim.x) {
    const float v = load_bf16(X + c);
    for (int i = 0; i < mix; ++i) acc[i] += v * fn[i * width + c];
    acc[mix] += v * v;
  }
  block_sums(acc, mix + 1, out);
  if (threadIdx.x == 0) {
    const float rs = 1.0f / sqrtf(out[mix] / static_cast<float>(width) + eps);
    for (int i = 0; i < mix; ++i) out[i] *= rs;
  }
  __syncthreads();
}

__device__ void sinkhorn(float* c, int hc, int iters, float eps) {
  float sums[kMaxHc];
  for (int j = 0; j < hc; ++j) {
    float* row = c + j * hc;
    float mx = row[0];
    for (int k = 1; k < hc; ++k) mx = fmaxf(mx, row[k]);
    float s = 0;
    for (int k = 0; k < hc; ++k) s += (row[k] = expf(row[k] - mx));
    for (int k = 0; k < hc; ++k) row[k] = row[k] / s + eps;
  }
  for (int it = 0; it < iters; ++it) {
    if (it > 0) {
      for (int j = 0; j < hc; ++j) {
        float s = 0;
        for (int k = 0; k < hc; ++k) s += c[j * hc + k];
        for (int k = 0; k < hc; ++k) c[j * hc + k] /= s + eps;
      }
    }
    for (int k = 0; k < hc; ++k) {
      sums[k] = 0;
      for (int j = 0; j < hc; ++j) sums[k] += c[j * hc + k];
    }
    for (int j = 0; j < hc; ++j)
      for (int k = 0; k < hc; ++k) c[j * hc + k] /= sums[k] + eps;
  }
}

// y = bf16(sum_j pre_j * X_j), j ascending, no fused multiply-add (as on the CPU).
__device__ void weighted_streams(const uint16_t* X, const float* pre, int hc, int64_t dim, uint16_t* y) {
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
    float acc = 0;
    for (int j = 0; j < hc; ++j) acc = __fadd_rn(acc, __fmul_rn(pre[j], load_bf16(X + j * dim + c)));
    y[c] = f_to_bf16(acc);
  }
}

__global__ void hc_pre_kernel(const uint16_t* h, int hc, int64_t dim, const float* fn, const float* scale,
                              const float* base, float norm_eps, float hc_eps, int iters, uint16_t* x, float* post,
                              float* comb) {
  __shared__ float mix[kMaxMix + 1];
  __shared__ float pre[kMaxHc];
  const int64_t t = blockIdx.x, width = hc * dim;
  const int mw = (2 + hc) * hc;
  token_mix(h + t * width, width, fn, mw, norm_eps, mix);
  if (threadIdx.x == 0) {
    for (int j = 0; j < hc; ++j) {
      pre[j] = sigmoidf(mix[j] * scale[0] + base[j]) + hc_eps;
      post[t * hc + j] = 2 * sigmoidf(mix[hc + j] * scale[1] + base[hc + j]);
    }
    float* c = comb + t * hc * hc;
    for (int i = 0; i < hc * hc; ++i) c[i] = mix[2 * hc + i] * scale[2] + base[2 * hc + i];
    sinkhorn(c, hc, iters, hc_eps);
  }
  __syncthreads();
  weighted_streams(h + t * width, pre, hc, dim, x + t * dim);
}

__global__ void hc_head_kernel(const uint16_t* h, int hc, int64_t dim, const float* fn, const float* scale,
                               const float* base, float norm_eps, float hc_eps, uint16_t* y) {
  __shared__ float mix[kMaxMix + 1];
  __shared__ float pre[kMaxHc];
  const int64_t t = blockIdx.x, width = hc * dim;
  token_mix(h + t * width, width, fn, hc, norm_eps, mix);
  if (threadIdx.x == 0)
    for (int j = 0; j < hc; ++j) pre[j] = sigmoidf(mix[j] * scale[0] + base[j]) + hc_eps;
  __syncthreads();
  weighted_streams(h + t * width, pre, hc, dim, y + t * dim);
}

// One thread per (token, channel): all hc outputs of that channel (reads precede writes: out may alias).
__global__ void hc_post_kernel(const uint16_t* x, const uint16_t* res, const float* post, const float* comb,
                               uint16_t* out, int64_t tokens, int hc, int64_t dim) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= tokens * dim) return;
  const int64_t t = i / dim, c = i % dim;
  float r[kMaxHc];
  for (int j = 0; j < hc; ++j) r[j] = load_bf16(res + (t * hc + j) * dim + c);
  const float xv = load_bf16(x + t * dim + c);
  const float* cm = comb + t * hc * hc;
  for (int k = 0; k < hc; ++k) {
    float s = 0;
    for (int j = 0; j < hc; ++j) s = __fadd_rn(s, __fmul_rn(cm[j * hc + k], r[j]));
    out[(t * hc + k) * dim + c] = f_to_bf16(__fadd_rn(__fmul_rn(post[t * hc + k], xv), s));
  }
}

}  // namespace

void hc_pre(const uint16_t* h, int64_t tokens, int hc, int64_t dim, const float* fn, const float* scale,
            const float* base, float norm_eps, float hc_eps, int sinkhorn_iters, uint16_t* x, float* post, float* comb,
            cudaStream_t stream) {
  DSV4_CUDA_REQUIRE(hc >= 1 && hc <= kMaxHc, "hc_pre: hc must lie in [1, 8]");
  if (tokens == 0) return;
  hc_pre_kernel<<<static_cast<unsigned>(tokens), kThreads, 0, stream>>>(h, hc, dim, fn, scale, base, norm_eps, hc_eps,
                                                                        sinkhorn_iters, x, post, comb);
  DSV4_CUDA_CHECK_LAUNCH();
}

void hc_post(const uint16_t* x, const uint16_t* residual, const float* post, const float* comb, uint16_t* out,
             int64_t tokens, int hc, int64_t dim, cudaStream_t stream) {
  DSV4_CUDA_REQUIRE(hc >= 1 && hc <= kMaxHc, "hc_post: hc must lie in [1, 8]");
  const int64_t n = tokens * dim;
  if (n == 0) return;
  hc_post_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, stream>>>(x, residual, post, comb,
                                                                                                out, tokens, hc, dim);
  DSV4_CUDA_CHECK_LAUNCH();
}

void hc_head(const uint16_t* h, int64_t tokens, int hc, int64_t dim, const float* fn, const float* scale,
             const float* base, float norm_eps, float hc_eps, uint16_t* y, cudaStream_t stream) {
  DSV4_CUDA_REQUIRE(hc >= 1 && hc <= kMaxHc, "hc_head: hc must lie in [1, 8]");
  if (tokens == 0) return;
  hc_head_kernel<<<static_cast<unsigned>(tokens), kThreads, 0, stream>>>(h, hc, dim, fn, scale, base, norm_eps, hc_eps,
                                                                         y);
  DSV4_CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda
