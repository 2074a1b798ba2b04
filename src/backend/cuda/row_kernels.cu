#include <cuda_bf16.h>
#include <cuda_fp4.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/row_kernels.h"

namespace dsv4::cuda {
namespace {

constexpr int kRmsThreads = 256;
constexpr int kRmsChunk = 2048;  // squares staged per step (a multiple of 8: chains keep their elements)

// The CPU's rms_norm_row: ss in its 8-lane order (warp 0 runs the chains over staged squares), then
// r = 1/sqrt(ss/n + eps), y = bf16(w * (x * r)), every step rounded apart.
__global__ void rms_norm_kernel(const uint16_t* x, uint16_t* y, const uint16_t* __restrict__ w, int64_t dim,
                                float eps) {
  pdl_enter();
  __shared__ float sq[kRmsChunk];
  __shared__ float r_shared;
  const uint16_t* xr = x + blockIdx.x * dim;
  float chain = 0.0f;
  for (int64_t c0 = 0; c0 < dim; c0 += kRmsChunk) {
    const int len = static_cast<int>(min(int64_t{kRmsChunk}, dim - c0));
    __syncthreads();  // the previous chunk is summed
    for (int i = threadIdx.x; i < len; i += blockDim.x) {
      const float v = load_bf16(xr + c0 + i);
      sq[i] = __fmul_rn(v, v);
    }
    __syncthreads();
    if (threadIdx.x < kWarp) {
#pragma unroll 8
      for (int i = threadIdx.x % 8; i < len; i += 8) chain = __fadd_rn(chain, sq[i]);
    }
  }
  if (threadIdx.x < kWarp) publish_rms(chain, static_cast<float>(dim), eps, &r_shared);
  __syncthreads();
  const float r = r_shared;
  uint16_t* yr = y + blockIdx.x * dim;
  // Eight elements a thread loaded before any is stored: y may alias x, so the compiler cannot move the
  // next loads above a store, and one row per CTA would otherwise wait out a load latency per element.
  constexpr int kBatch = 8;
  for (int64_t i0 = threadIdx.x; i0 < dim; i0 += kBatch * blockDim.x) {
    float xv[kBatch], wv[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int64_t i = i0 + u * blockDim.x;
      xv[u] = i < dim ? load_bf16(xr + i) : 0.0f;
      wv[u] = i < dim ? load_bf16(w + i) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int64_t i = i0 + u * blockDim.x;
      if (i < dim) yr[i] = f_to_bf16(__fmul_rn(wv[u], __fmul_rn(xv[u], r)));
    }
  }
}

// The same for rows of at most kPer * kRmsThreads elements, in one pass: every load (x and w) is
// issued at the start and x stays in registers, so a row waits out one load latency instead of one per
// staged chunk plus another for the output pass.
template <int kPer>
__global__ void __launch_bounds__(kRmsThreads)
    rms_norm_regs_kernel(const uint16_t* x, uint16_t* y, const uint16_t* __restrict__ w, int dim, float eps) {
  pdl_enter();
  __shared__ float sq[kPer * kRmsThreads];
  __shared__ float r_shared;
  const uint16_t* xr = x + int64_t{blockIdx.x} * dim;
  float xv[kPer], wv[kPer];
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    const int i = threadIdx.x + u * kRmsThreads;
    xv[u] = i < dim ? load_bf16(xr + i) : 0.0f;
    wv[u] = i < dim ? load_bf16(w + i) : 0.0f;
  }
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    const int i = threadIdx.x + u * kRmsThreads;
    if (i < dim) sq[i] = __fmul_rn(xv[u], xv[u]);
  }
  __syncthreads();
  if (threadIdx.x < kWarp) {
    float chain = 0.0f;
#pragma unroll 8
    for (int i = threadIdx.x % 8; i < dim; i += 8) chain = __fadd_rn(chain, sq[i]);
    publish_rms(chain, static_cast<float>(dim), eps, &r_shared);
  }
  __syncthreads();
  const float r = r_shared;
  uint16_t* yr = y + int64_t{blockIdx.x} * dim;
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    const int i = threadIdx.x + u * kRmsThreads;
    if (i < dim) yr[i] = f_to_bf16(__fmul_rn(wv[u], __fmul_rn(xv[u], r)));
  }
}

// One warp per head (head_rms_norm_warp); with positions, the head's RoPE follows in the same warp (each
// warp its own (cos, sin): a CTA-shared copy made behind a barrier measured slower, the warps' sincos
// overlapping the others' loads).
// The lane's first (cos, sin) is made before the wait on the previous kernel (positions are the step's
// inputs), and the head's row is requested into L1 right after it, so that the norm's chained loads hit.
__global__ void head_rms_norm_kernel(uint16_t* x, int64_t heads, int d, float eps, int heads_per_row,
                                     const int32_t* positions, const float* freqs, int half) {
  const int64_t h = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / kWarp;
  if (h >= heads) return;  // uniform over the warp
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  uint16_t* q = x + h * d;
  const float p = positions ? static_cast<float>(positions[h / heads_per_row]) : 0.0f;
  const float2 first = positions && lane < half ? rope_cos_sin(__fmul_rn(p, freqs[lane])) : make_float2(0.0f, 0.0f);
  pdl_enter();
  for (int b = 128 * lane; b < 2 * d; b += 128 * kWarp) asm volatile("prefetch.global.L1 [%0];" ::"l"(q + b / 2));
  head_rms_norm_warp<1>(&q, 1, d, eps, positions ? half : 0,
                        [&](int pair) { return pair == lane ? first : rope_cos_sin(__fmul_rn(p, freqs[pair])); });
}

// A CTA a row's share of its heads (heads / head_split of them, in order): the row's (cos, sin) as the
// CPU's glibc (rope_rotate) made once a CTA, then a thread a (head, pair). A decode step's few rows split
// their heads over several CTAs, so that each thread rotates one pair, not eight in a chain.
__global__ void rope_kernel(uint16_t* x, int heads, int head_dim, int half, const int32_t* positions,
                            const float* freqs, bool inverse, int head_split) {
  pdl_enter();
  extern __shared__ float2 cs[];  // [half]
  const int64_t row = blockIdx.x / head_split;
  const int part = static_cast<int>(blockIdx.x % head_split);
  const int h0 = part * heads / head_split, h1 = (part + 1) * heads / head_split;
  for (int i = static_cast<int>(threadIdx.x); i < half; i += blockDim.x)
    cs[i] = rope_cos_sin(__fmul_rn(static_cast<float>(positions[row]), freqs[i]));
  __syncthreads();
  for (int i = static_cast<int>(threadIdx.x); i < (h1 - h0) * half; i += blockDim.x) {
    const int pair = i % half;
    rotate_pair(x + (row * heads + h0 + i / half) * head_dim + (head_dim - 2 * half) + 2 * pair, cs[pair], inverse);
  }
}

__device__ __forceinline__ float ceil_pow2(float v) { return e8_value(ceil_pow2_e8(v)); }

// Q4 of a bf16 value v whose 32-block is held by the calling warp's lanes (one value a lane): the
// block's power-of-two scale from the warp's amax, the e2m1 code, the dequantized bf16 (quant_sim).
__device__ __forceinline__ uint16_t q4_sim_warp(float v) {
  const float s = ceil_pow2(fmaxf(warp_max(fabsf(v)), 6.0f * 0x1p-126f) * (1.0f / 6.0f));
  const __nv_fp4_e2m1 q(fminf(fmaxf(v / s, -6.0f), 6.0f));
  return f_to_bf16(static_cast<float>(q) * s);
}

// Rows shorter than a warp (dim 2..16): one block per row, dim/2 threads; the butterflies in the CPU's
// order with exact fp32 adds.
__global__ void hadamard_kernel(uint16_t* x, int dim, float scale) {
  pdl_enter();
  extern __shared__ float buf[];
  uint16_t* row = x + int64_t{blockIdx.x} * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) buf[i] = load_bf16(row + i);
  __syncthreads();
  hadamard_butterflies(buf, dim);
  for (int i = threadIdx.x; i < dim; i += blockDim.x) row[i] = f_to_bf16(__fmul_rn(buf[i], scale));
}

// A warp a row of dim = 32·kPerLane (32..1024), kHadamardRows rows a CTA: lane l holds elements l + 32i.
// The butterflies of strides below 32 pair lanes (shuffles), the wider ones a lane's own registers, in
// the CPU's stage order; each output is the CPU's add or subtract of the same two values, so the bits
// are the CPU's. kFp4: then Q4 of each 32-block (register i across the warp is block i).
constexpr int kHadamardRows = 8;
template <int kPerLane, bool kFp4>
__global__ void hadamard_warp_kernel(uint16_t* x, int64_t rows, float scale) {
  pdl_enter();
  const int64_t row = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / kWarp;
  if (row >= rows) return;  // the whole warp
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  uint16_t* p = x + row * (kPerLane * kWarp) + lane;
  float v[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) v[i] = load_bf16(p + kWarp * i);
#pragma unroll
  for (int h = 1; h < kWarp; h *= 2) {
    const bool upper = lane & h;  // element j + h of its pair
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const float o = __shfl_xor_sync(0xffffffffu, v[i], h);
      v[i] = upper ? __fsub_rn(o, v[i]) : __fadd_rn(v[i], o);
    }
  }
#pragma unroll
  for (int h = 1; h < kPerLane; h *= 2) {  // strides 32h
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      if (i & h) continue;
      const float a = v[i], b = v[i + h];
      v[i] = __fadd_rn(a, b);
      v[i + h] = __fsub_rn(a, b);
    }
  }
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const uint16_t y = f_to_bf16(__fmul_rn(v[i], scale));
    p[kWarp * i] = kFp4 ? q4_sim_warp(bf16_to_f(y)) : y;
  }
}

// One warp per block of `block` elements (32..512); each lane holds block/32 of them.
template <int kPerLane>
__global__ void quant_sim_e4m3_kernel(uint16_t* x, int64_t rows, int64_t cols, int64_t stride) {
  pdl_enter();
  const int64_t nblk = cols / (kPerLane * kWarp);
  const int64_t warp = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (warp >= rows * nblk) return;
  uint16_t* p = x + (warp / nblk) * stride + (warp % nblk) * kPerLane * kWarp + lane * kPerLane;
  float v[kPerLane];
  float amax = 0;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) amax = fmaxf(amax, fabsf(v[i] = load_bf16(p + i)));
  const float s = ceil_pow2(fmaxf(warp_max(amax), 1e-4f) * (1.0f / 448.0f)), inv = pow2_inverse(s);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const __nv_fp8_e4m3 q(fminf(fmaxf(v[i] * inv, -448.0f), 448.0f));
    p[i] = f_to_bf16(static_cast<float>(q) * s);
  }
}

__global__ void quant_sim_e2m1_kernel(uint16_t* x, int64_t rows, int64_t cols, int64_t stride) {
  pdl_enter();
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;  // cols % 32 == 0: warps align to blocks
  const bool live = i < rows * cols;
  uint16_t* p = x + (live ? (i / cols) * stride + i % cols : 0);
  const uint16_t q = q4_sim_warp(live ? load_bf16(p) : 0.0f);
  if (live) *p = q;
}

// An id outside the vocabulary gives a zero row and is reported.
__global__ void embed_kernel(const int32_t* ids, int64_t tokens, const uint16_t* table, int64_t vocab, int64_t dim,
                             int copies, uint16_t* out, int32_t* err) {
  pdl_enter();
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= tokens * copies * dim) return;
  const int64_t t = i / (copies * dim), k = i % dim;
  const int32_t id = ids[t];
  if (id < 0 || id >= vocab) {
    out[i] = 0;
    return report(err, DeviceError::kEmbedId);
  }
  out[i] = table[int64_t{id} * dim + k];
}

// One block a row; T is uint4 (16-byte vectors) or uint8_t.
template <typename T>
__global__ void gather_rows_kernel(const T* in, int64_t in_rows, const int32_t* index, int64_t width, T* out,
                                   int32_t* err) {
  pdl_enter();
  const int64_t r = blockIdx.x, n = width / static_cast<int64_t>(sizeof(T));
  const int32_t i = index[r];
  const bool ok = i >= 0 && i < in_rows;
  if (!ok && threadIdx.x == 0) report(err, DeviceError::kGatherRow);
  for (int64_t k = threadIdx.x; k < n; k += blockDim.x) out[r * n + k] = ok ? in[int64_t{i} * n + k] : T{};
}

unsigned blocks_for(int64_t threads, int per_block) {
  return static_cast<unsigned>((threads + per_block - 1) / per_block);
}

void quant_sim_e4m3(uint16_t* x, int64_t rows, int64_t cols, int64_t stride, int block, cudaStream_t stream) {
  DSV4_CUDA_REQUIRE(block % 32 == 0 && block >= 32 && block <= 512 && cols % block == 0,
                    "quant_sim_e4m3: block must be 32..512, a multiple of 32 dividing the columns");
  const int64_t warps = rows * (cols / block);
  if (warps == 0) return;
  const unsigned grid = blocks_for(warps * kWarp, 256);
  switch (block / kWarp) {
    case 1:
      return launch_kernel(quant_sim_e4m3_kernel<1>, grid, 256, 0, stream, x, rows, cols, stride);
    case 2:
      return launch_kernel(quant_sim_e4m3_kernel<2>, grid, 256, 0, stream, x, rows, cols, stride);
    case 4:
      return launch_kernel(quant_sim_e4m3_kernel<4>, grid, 256, 0, stream, x, rows, cols, stride);
    case 8:
      return launch_kernel(quant_sim_e4m3_kernel<8>, grid, 256, 0, stream, x, rows, cols, stride);
    case 16:
      return launch_kernel(quant_sim_e4m3_kernel<16>, grid, 256, 0, stream, x, rows, cols, stride);
    default:
      throw_error("quant_sim_e4m3: block must be 32, 64, 128, 256 or 512");
  }
}

void quant_sim_e2m1(uint16_t* x, int64_t rows, int64_t cols, int64_t stride, cudaStream_t stream) {
  DSV4_CUDA_REQUIRE(cols % 32 == 0, "quant_sim_e2m1: the columns must be a multiple of 32");
  if (rows * cols == 0) return;
  launch_kernel(quant_sim_e2m1_kernel, blocks_for(rows * cols, 256), 256, 0, stream, x, rows, cols, stride);
}

}  // namespace

void rms_norm(const RmsNormParams& p, cudaStream_t stream) {
  if (p.rows == 0) return;
  const auto grid = static_cast<unsigned>(p.rows);
  const int d = static_cast<int>(p.dim);
  if (p.dim <= 4 * kRmsThreads) {
    launch_kernel(rms_norm_regs_kernel<4>, grid, kRmsThreads, 0, stream, p.x, p.y, p.weight, d, p.eps);
  } else if (p.dim <= 16 * kRmsThreads) {
    launch_kernel(rms_norm_regs_kernel<16>, grid, kRmsThreads, 0, stream, p.x, p.y, p.weight, d, p.eps);
  } else if (p.dim <= 32 * kRmsThreads) {
    launch_kernel(rms_norm_regs_kernel<32>, grid, kRmsThreads, 0, stream, p.x, p.y, p.weight, d, p.eps);
  } else {
    launch_kernel(rms_norm_kernel, grid, kRmsThreads, 0, stream, p.x, p.y, p.weight, p.dim, p.eps);
  }
}

void head_rms_norm(const HeadRmsNormParams& p, const float* freqs, cudaStream_t stream) {
  const int64_t heads = p.rows * p.heads;
  if (heads == 0) return;
  launch_kernel(head_rms_norm_kernel, blocks_for(heads * kWarp, 256), 256, 0, stream, p.x, heads, p.head_dim, p.eps,
                p.heads, p.positions, freqs, p.rope.rope_dim / 2);
}

void rope(const RopeParams& p, const float* freqs, cudaStream_t stream) {
  constexpr int kThreads = 256, kMinCtas = 128;
  const int half = p.rope.rope_dim / 2;
  if (p.rows * p.heads * half == 0) return;
  DSV4_CUDA_REQUIRE(half <= 4096, "rope: rope_dim above 8192");
  // Rows under kMinCtas: each row's heads over up to kMinCtas / rows CTAs, each keeping a thread's worth
  // of pairs or more.
  const int64_t room = std::max<int64_t>(1, kMinCtas / p.rows);
  const int split =
      static_cast<int>(std::clamp<int64_t>(std::min<int64_t>(room, int64_t{p.heads} * half / kWarp), 1, p.heads));
  launch_kernel(rope_kernel, static_cast<unsigned>(p.rows * split), kThreads, sizeof(float2) * half, stream, p.x,
                p.heads, p.head_dim, half, p.positions, freqs, p.inverse, split);
}

void hadamard(const HadamardParams& p, cudaStream_t stream) {
  const int dim = p.dim;
  DSV4_CUDA_REQUIRE(dim >= 2 && dim <= 1024 && (dim & (dim - 1)) == 0, "hadamard: dim must be a power of two <= 1024");
  if (p.rows == 0) return;
  const float scale = static_cast<float>(std::pow(static_cast<double>(dim), -0.5));
  if (dim >= kWarp) {  // a warp a row
    const auto grid = static_cast<unsigned>((p.rows + kHadamardRows - 1) / kHadamardRows);
    const auto go = [&](auto per_lane) {
      constexpr int kPer = decltype(per_lane)::value;
      const auto kernel = p.fp4_after ? hadamard_warp_kernel<kPer, true> : hadamard_warp_kernel<kPer, false>;
      launch_kernel(kernel, grid, kHadamardRows * kWarp, 0, stream, p.x, p.rows, scale);
    };
    switch (dim / kWarp) {
      case 1:
        return go(std::integral_constant<int, 1>{});
      case 2:
        return go(std::integral_constant<int, 2>{});
      case 4:
        return go(std::integral_constant<int, 4>{});
      case 8:
        return go(std::integral_constant<int, 8>{});
      case 16:
        return go(std::integral_constant<int, 16>{});
      default:
        return go(std::integral_constant<int, 32>{});
    }
  }
  DSV4_CUDA_REQUIRE(!p.fp4_after, "hadamard: the FP4 simulation after it takes rows of 32 or more");
  launch_kernel(hadamard_kernel, static_cast<unsigned>(p.rows), dim / 2, dim * sizeof(float), stream, p.x, dim, scale);
}

void quant_sim(const QuantSimParams& p, cudaStream_t stream) {
  const int64_t stride = p.row_stride ? p.row_stride : p.cols;
  if (p.kind == QuantSim::kFp8) return quant_sim_e4m3(p.x, p.rows, p.cols, stride, p.block, stream);
  quant_sim_e2m1(p.x, p.rows, p.cols, stride, stream);
}

void gather_rows(const GatherRowsParams& p, int32_t* err, cudaStream_t stream) {
  if (p.rows == 0) return;
  DSV4_CUDA_REQUIRE(p.rows <= std::numeric_limits<int32_t>::max(), "gather_rows: more rows than a grid holds");
  const auto grid = static_cast<unsigned>(p.rows);
  const bool vectors =
      p.width % 16 == 0 && reinterpret_cast<uintptr_t>(p.in) % 16 == 0 && reinterpret_cast<uintptr_t>(p.out) % 16 == 0;
  if (vectors) {
    launch_kernel(gather_rows_kernel<uint4>, grid, 256, 0, stream, static_cast<const uint4*>(p.in), p.in_rows, p.index,
                  p.width, static_cast<uint4*>(p.out), err);
  } else {
    launch_kernel(gather_rows_kernel<uint8_t>, grid, 256, 0, stream, static_cast<const uint8_t*>(p.in), p.in_rows,
                  p.index, p.width, static_cast<uint8_t*>(p.out), err);
  }
}

void embed(const EmbedParams& p, int32_t* err, cudaStream_t stream) {
  const int64_t n = p.tokens * p.copies * p.dim;
  if (n == 0) return;
  launch_kernel(embed_kernel, blocks_for(n, 256), 256, 0, stream, p.ids, p.tokens, p.table, p.vocab, p.dim, p.copies,
                p.out, err);
}

}  // namespace dsv4::cuda
