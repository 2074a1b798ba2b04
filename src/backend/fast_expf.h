// exp(x) for the fast numerics tier's sigmoids (spec/NUMERICS.md: approximate transcendentals within 4
// ulp of the correctly rounded value). fp32 arithmetic alone: no fp64, no table, no approximate
// instruction, so the host runs the very arithmetic the device runs and a CPU test bounds its error on
// every float. The exact tier keeps glibc's expf (backend/cuda/glibc_expf.cuh), whose double-precision
// steps and conversions made the fast tier's SwiGLU compute-bound (session 37: 383 us a call at 8K tokens).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace dsv4 {

// The float of a bit pattern, both sides.
DSV4_HOST_DEVICE float fast_expf_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  __builtin_memcpy(&x, &u, sizeof x);
  return x;
#endif
}

// x = k ln2 + r (Cody-Waite: ln2's high part has 16 significant bits, so k ln2_hi and x - k ln2_hi are
// exact for |k| < 256), exp(r) by its Taylor series to r^7 (|r| <= ln2 / 2: the first term left out is
// under 2^-27 of the sum), then 2^k in two exact steps so that results past 2^127 and subnormal ones
// round once. Every operation is fmaf or a single rounding, so no compiler contraction changes a bit.
// Within 1 ulp of the correctly rounded exp (99.5% of floats exactly it; tests/unit/backend/fast_expf_test.cpp).
DSV4_HOST_DEVICE float fast_expf(float x) {
  if (!(x > -104.0f)) return x != x ? x : 0.0f;              // NaN stays NaN; exp of -inf and x <= -104 underflow
  if (x > 89.0f) return fast_expf_from_bits(0x7f800000u);    // +inf
  constexpr float kLog2e = 1.44269502162933349609375f;       // 0x1.715476p+0
  constexpr float kLn2Hi = 0.693145751953125f;               // 0x1.62e400p-1
  constexpr float kLn2Lo = 1.428606765330187045037746e-06f;  // 0x1.7f7d1cp-20
  const float k = rintf(x * kLog2e);
  float r = fmaf(k, -kLn2Hi, x);
  r = fmaf(k, -kLn2Lo, r);
  float p = 1.0f / 5040;
  p = fmaf(p, r, 1.0f / 720);
  p = fmaf(p, r, 1.0f / 120);
  p = fmaf(p, r, 1.0f / 24);
  p = fmaf(p, r, 1.0f / 6);
  p = fmaf(p, r, 0.5f);
  p = fmaf(p, r, 1.0f);
  p = fmaf(p, r, 1.0f);
  const auto ki = static_cast<int32_t>(k);   // in [-150, 129]
  const int32_t k1 = ki >> 1, k2 = ki - k1;  // floor(ki / 2) and the rest: each in [-75, 65]
  const float s1 = fast_expf_from_bits(static_cast<uint32_t>(k1 + 127) << 23);
  const float s2 = fast_expf_from_bits(static_cast<uint32_t>(k2 + 127) << 23);
  return (p * s1) * s2;  // the first product exact (p in [0.7, 1.5], s1 normal)
}

}  // namespace dsv4
