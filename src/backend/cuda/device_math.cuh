// Device helpers shared by the CUDA kernels: bf16 and low-precision number formats with the CPU
// backend's exact rounding (core/number_formats.h, core/quant.h), warp/block reductions with a fixed
// order (bit-reproducible), and entry decoding for EntryTable (core/kv_entry.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp4.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "backend/cuda/device_error.h"
#include "backend/cuda/glibc_sincosf.cuh"
#include "core/kv_entry.h"

namespace dsv4::cuda {

constexpr int kWarp = 32;

__device__ __forceinline__ float bf16_to_f(uint16_t b) { return __bfloat162float(__ushort_as_bfloat16(b)); }
__device__ __forceinline__ uint16_t f_to_bf16(float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }
__device__ __forceinline__ float load_bf16(const uint16_t* p) { return bf16_to_f(*p); }
__device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// Four bf16 values (the first in u.x's low half) as floats.
__device__ __forceinline__ void bf16x4(uint2 u, float (&v)[4]) {
  v[0] = __uint_as_float(u.x << 16);
  v[1] = __uint_as_float(u.x & 0xffff0000u);
  v[2] = __uint_as_float(u.y << 16);
  v[3] = __uint_as_float(u.y & 0xffff0000u);
}

// Four consecutive bf16 values (8-byte aligned, not written while the kernel runs) as floats.
__device__ __forceinline__ void bf16x4(const uint16_t* src, float (&v)[4]) {
  bf16x4(__ldg(reinterpret_cast<const uint2*>(src)), v);
}
// Four consecutive bf16 values (not written while the kernel runs) as floats: one 8-byte load where
// src allows it, else four 2-byte ones.
__device__ __forceinline__ void bf16x4_at(const uint16_t* src, float (&v)[4]) {
  if (reinterpret_cast<uintptr_t>(src) % 8 == 0) return bf16x4(src, v);
#pragma unroll
  for (int i = 0; i < 4; ++i) v[i] = bf16_to_f(src[i]);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The CPU's 8-lane fp32 sums (backend/cpu/cpu_support.h sum, sum_squares, dot): chain j adds the
// elements i = j (mod 8) in ascending i, starting from 0, then ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)).
// Lane L of a warp runs chain L % 8 (four copies of each). Padding with +0 changes nothing: a chain
// that starts at +0 never holds -0.

// The combine, given chain lane % 8 in every lane; the total in every lane.
__device__ __forceinline__ float lane8_combine(float l) {
  l = __fadd_rn(l, __shfl_xor_sync(0xffffffffu, l, 1));
  l = __fadd_rn(l, __shfl_xor_sync(0xffffffffu, l, 2));
  return __fadd_rn(l, __shfl_xor_sync(0xffffffffu, l, 4));
}

// Warp 0 of a row's CTA, holding chain lane % 8 of the squares in every lane: r = 1/sqrt(ss/n + eps) from
// ss = the CPU's lane combine, into *r_shared (lane 0): rms_norm's factor.
__device__ __forceinline__ void publish_rms(float chain, float n, float eps, float* r_shared) {
  const float ss = lane8_combine(chain);
  if (threadIdx.x == 0) *r_shared = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, n), eps)));
}

// The 8 chains over values spread across a warp: add() takes one 32-element group (v = element
// 32g + lane, groups in ascending g, 0 past the end); total() as lane8_combine.
struct Lane8Sum {
  float acc = 0.0f;
  __device__ __forceinline__ void add(float v) {
    const int j = threadIdx.x % 8;
#pragma unroll
    for (int k = 0; k < 4; ++k) acc = __fadd_rn(acc, __shfl_sync(0xffffffffu, v, j + 8 * k));
  }
  __device__ __forceinline__ float total() const { return lane8_combine(acc); }
};

// UE8M0 exponent byte of the smallest power of two >= v (v positive, normal), and its value.
__device__ __forceinline__ uint8_t ceil_pow2_e8(float v) {
  const uint32_t u = __float_as_uint(v);
  return static_cast<uint8_t>(((u >> 23) & 0xffu) + ((u & 0x7fffffu) != 0u));
}
__device__ __forceinline__ float e8_value(uint8_t e) { return __uint_as_float(static_cast<uint32_t>(e) << 23); }

__device__ __forceinline__ float e4m3_to_f(uint8_t code) {
  __nv_fp8_e4m3 c;
  c.__x = code;
  return static_cast<float>(c);
}
__device__ __forceinline__ uint8_t f_to_e4m3(float v) {  // v already scaled and clamped to ±448
  return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
}
__device__ __forceinline__ float e2m1_to_f(uint8_t nibble) {
  constexpr float kValues[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float v = kValues[nibble & 7];
  return (nibble & 8) ? -v : v;
}

// Activation quantization (MODEL.md §2.2, block 128), shared by the GEMM kernels and the MoE's fused
// gather and SwiGLU quantizers.

// The power-of-two scale of a 128-block from its amax: 2^ceil(log2(max(amax, 1e-4) · fp32(1/448))).
__device__ __forceinline__ float act_scale(float amax) {
  return e8_value(ceil_pow2_e8(fmaxf(amax, 1e-4f) * (1.0f / 448.0f)));
}

// 1/s for a power-of-two scale s (or 0, inf, NaN): exact, so v · pow2_inverse(s) is v / s bit for bit (both
// round the same real v·2^-k) at a multiply's cost instead of a division's.
__device__ __forceinline__ float pow2_inverse(float s) { return __frcp_rn(s); }

// The e4m3 code of v under scale s = 1 / inv (core/quant.h's quantize_e4m3; inv = pow2_inverse(s)).
__device__ __forceinline__ uint32_t act_code(float v, float inv) {
  return f_to_e4m3(fminf(fmaxf(v * inv, -448.0f), 448.0f));
}

// A warp quantizes one 128-block, four values a lane: returns the block's scale, codes packed in lane order.
__device__ __forceinline__ float quantize_lane4(const float (&v)[4], uint32_t& packed) {
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) amax = fmaxf(amax, fabsf(v[i]));
  const float s = act_scale(warp_max(amax)), inv = pow2_inverse(s);
  packed = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) packed |= act_code(v[i], inv) << (8 * i);
  return s;
}

// An angle's (cos, sin) bit for bit as the CPU's glibc cosf/sinf (glibc_sincosf.cuh: the correctly
// rounded values differ from them on ~1% of angles).
__device__ __forceinline__ float2 rope_cos_sin(float angle) { return make_float2(host_cosf(angle), host_sinf(angle)); }

// RoPE of one interleaved pair (re, im) by an angle's (cos, sin), forward or inverse, in fp32 without
// contraction; callers round the results to bf16. Kernels whose heads share a position make the
// (cos, sin) once (rope_cos_sin) instead of once a head.
__device__ __forceinline__ void rope_rotate_cs(float& re, float& im, float2 cs, bool inverse) {
  const float c = cs.x, s = inverse ? -cs.y : cs.y;
  const float r = re, i = im;
  re = __fsub_rn(__fmul_rn(r, c), __fmul_rn(i, s));
  im = __fadd_rn(__fmul_rn(r, s), __fmul_rn(i, c));
}
// The same by `angle`.
__device__ __forceinline__ void rope_rotate(float& re, float& im, float angle, bool inverse) {
  rope_rotate_cs(re, im, rope_cos_sin(angle), inverse);
}

// RoPE of the bf16 pair at v, in place, by an angle's (cos, sin).
__device__ __forceinline__ void rotate_pair(uint16_t* v, float2 cs, bool inverse) {
  float re = load_bf16(v), im = load_bf16(v + 1);
  rope_rotate_cs(re, im, cs, inverse);
  v[0] = f_to_bf16(re);
  v[1] = f_to_bf16(im);
}

// The Q-norm (MODEL.md's per-head RMS norm) of n <= N heads of d values each, in place, by one warp,
// every step a bf16 op as on the CPU (each head's sum of its bf16 squares in the 8-lane order); then,
// with half > 0, the RoPE of each head's last 2·half values, pair i by cs(i), its (cos, sin). The heads'
// chains interleave (N in flight) but each keeps its own order: head_rms_norm (one head a warp) and the
// attention that normalises its queries in shared memory (four a warp) give the same bits.
template <int N, class CosSin>
__device__ __forceinline__ void head_rms_norm_warp(uint16_t* const* rows, int n, int d, float eps, int half,
                                                   CosSin&& cs) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  Lane8Sum s[N];
  for (int i = lane; i - lane < d; i += kWarp) {
#pragma unroll
    for (int h = 0; h < N; ++h) {  // every lane takes part in each add's shuffles
      const float v = h < n && i < d ? load_bf16(rows[h] + i) : 0.0f;
      s[h].add(round_bf16(__fmul_rn(v, v)));
    }
  }
  float r[N];
#pragma unroll
  for (int h = 0; h < N; ++h) {
    const float mean = round_bf16(__fdiv_rn(s[h].total(), static_cast<float>(d)));
    r[h] = round_bf16(__fdiv_rn(1.0f, __fsqrt_rn(round_bf16(__fadd_rn(mean, eps)))));
  }
  for (int i = lane; i < d; i += kWarp) {
#pragma unroll
    for (int h = 0; h < N; ++h)
      if (h < n) rows[h][i] = f_to_bf16(__fmul_rn(load_bf16(rows[h] + i), r[h]));
  }
  if (half == 0) return;
  __syncwarp();  // the normalised values written by other lanes
  for (int pair = lane; pair < half; pair += kWarp) {
    const float2 c = cs(pair);
#pragma unroll
    for (int h = 0; h < N; ++h)
      if (h < n) rotate_pair(rows[h] + (d - 2 * half) + 2 * pair, c, false);
  }
}

// The butterflies of H_n (Sylvester order) over v[0, n) in shared memory, in the CPU's order with exact
// fp32 adds; every thread of the CTA calls it, and it returns synchronised.
__device__ __forceinline__ void hadamard_butterflies(float* v, int n) {
  for (int h = 1; h < n; h *= 2) {
    for (int k = threadIdx.x; k < n / 2; k += blockDim.x) {
      const int j = (k / h) * 2 * h + k % h;
      const float a = v[j], b = v[j + h];
      v[j] = __fadd_rn(a, b);
      v[j + h] = __fsub_rn(a, b);
    }
    __syncthreads();
  }
}

// Element k of an entry in table t (exact decode); d = entry dim, r = rope dim (kAttnFp8).
__device__ __forceinline__ float entry_value(const EntryTable& t, const uint8_t* e, int k, int d, int r) {
  switch (t.format) {
    case KvEntryFormat::kBf16:
      return bf16_to_f(reinterpret_cast<const uint16_t*>(e)[k]);
    case KvEntryFormat::kF32:
      return reinterpret_cast<const float*>(e)[k];
    case KvEntryFormat::kAttnFp8: {
      const int n = d - r;
      if (k >= n) return bf16_to_f(reinterpret_cast<const uint16_t*>(e + n)[k - n]);
      return e4m3_to_f(e[k]) * e8_value(e[n + 2 * r + k / 64]);
    }
    case KvEntryFormat::kIndexFp4: {
      const uint8_t byte = e[k / 2];
      return e2m1_to_f((k & 1) ? byte >> 4 : byte & 0xf) * e8_value(e[d / 2 + k / 32]);
    }
    case KvEntryFormat::kIndexFp8: {
      float s;
      memcpy(&s, e + d, sizeof(float));
      return e4m3_to_f(e[k]) * s;
    }
  }
  return 0.0f;
}

// Records the first device-side index error (see DeviceError); err may be null.
__device__ __forceinline__ void report(int32_t* err, DeviceError code) {
  if (err) atomicCAS(err, 0, static_cast<int32_t>(code));
}

}  // namespace dsv4::cuda
