// Small helpers shared by the CPU kernels: decode tables, bf16 row conversion, per-thread scratch.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/number_formats.h"

// Hot loops are compiled twice, for AVX2 and for the x86-64 baseline, and chosen at run time. The
// "avx2" target does not enable FMA, and every loop keeps its lanes explicit, so both versions do
// the same IEEE operations on every element and give identical bits.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(DSV4_NO_SIMD_CLONES)
#define DSV4_SIMD_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define DSV4_SIMD_CLONES
#endif
// Helpers inlined into a cloned function, so that they are compiled for its target too.
#define DSV4_INLINE __attribute__((always_inline)) inline

namespace dsv4::cpu {

// e4m3 code -> float (all 256 codes).
const float* e4m3_table();

inline void bf16_to_f32(const uint16_t* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(in[i]);
}
inline void f32_to_bf16(const float* in, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = float_to_bf16(in[i]);
}

// Σ x[i], Σ x[i]² and Σ a[i]·b[i] in fp32 with a fixed order: 8 strided lanes (lane j sums i ≡ j mod 8 in
// ascending i), then ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)). Vectorizes without reassociation.
namespace detail {
constexpr int kLanes = 8;
DSV4_INLINE float combine(const float* l) { return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7])); }
}  // namespace detail

DSV4_INLINE float sum(const float* x, int64_t n) {
  float l[detail::kLanes] = {};
  int64_t i = 0;
  for (; i + detail::kLanes <= n; i += detail::kLanes) {
    for (int j = 0; j < detail::kLanes; ++j) l[j] += x[i + j];
  }
  for (int j = 0; i + j < n; ++j) l[j] += x[i + j];
  return detail::combine(l);
}

DSV4_INLINE float dot(const float* a, const float* b, int64_t n) {
  float l[detail::kLanes] = {};
  int64_t i = 0;
  for (; i + detail::kLanes <= n; i += detail::kLanes) {
    for (int j = 0; j < detail::kLanes; ++j) l[j] += a[i + j] * b[i + j];
  }
  for (int j = 0; i + j < n; ++j) l[j] += a[i + j] * b[i + j];
  return detail::combine(l);
}

DSV4_INLINE float sum_squares(const float* x, int64_t n) { return dot(x, x, n); }

// Logistic function as the reference evaluates it: 1 / (1 + exp(−x)), fp32.
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// Per-thread grow-only buffers, one per slot so that nested users on one thread never share.
enum class Scratch : int { kGemmA, kGemmTile, kGemmAcc, kRow, kRow2, kBlock, kBlockT, kScores, kCount };

template <typename T>
T* thread_scratch(Scratch slot, size_t n) {
  thread_local std::vector<std::byte> buffers[static_cast<int>(Scratch::kCount)];
  auto& b = buffers[static_cast<int>(slot)];
  if (b.size() < n * sizeof(T)) b.resize(n * sizeof(T));
  return reinterpret_cast<T*>(b.data());
}

}  // namespace dsv4::cpu
