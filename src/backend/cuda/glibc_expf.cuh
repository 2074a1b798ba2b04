// The CPU backend's std::exp(float), reproduced on the device bit for bit, for kernels whose
// outputs feed discrete choices (compressor pooling -> indexer keys, MoE gate scores -> routing).
#pragma once

#include <cstdint>

namespace dsv4::cuda {

// 2^(i/32) as double bits minus i << 47 (the table of the host's expf).
static __device__ const uint64_t kExp2Table[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51, 0x3fef72b83c7d517b,
    0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1, 0x3fef06fe0a31b715, 0x3feef1a7373aa9cb,
    0x3feedea64c123422, 0x3feece086061892d, 0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429,
    0x3feea47eb03a5585, 0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d, 0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069, 0x3fef5818dcfba487, 0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da, 0x3fefd0765b6e4540};

// std::exp(float) of the CPU backend, bit for bit: glibc's expf (its FMA variant, which x86-64 CPUs with
// FMA run): x·32/ln2 = k + r in double, 2^(k/32) from the table, a cubic in r, one rounding to float.
// CUDA's expf is off by up to 2 ulp, which would change pooled entries. Checked against glibc 2.36 on
// every float in [-103.9, 88.7] (the SSE2 variant differs on 2 of them).
__device__ inline float host_expf(float x) {
  constexpr double kInvLn2N = 0x1.71547652b82fep+0 * 32, kShift = 0x1.8p+52;
  constexpr double kC0 = 0x1.c6af84b912394p-5 / 32768, kC1 = 0x1.ebfce50fac4f3p-3 / 1024,
                   kC2 = 0x1.62e42ff0c52d6p-1 / 32;
  if (!(fabsf(x) < 88.0f)) {
    if (x == -INFINITY) return 0.0f;
    if (isnan(x) || x == INFINITY) return x + x;
    if (x > 0x1.62e42ep6f) return INFINITY;
    if (x < -0x1.9fe368p6f) return 0.0f;
  }
  const double xd = x;
  double kd = __fma_rn(kInvLn2N, xd, kShift);
  const uint64_t ki = static_cast<uint64_t>(__double_as_longlong(kd));
  kd = __dsub_rn(kd, kShift);
  const double r = __fma_rn(kInvLn2N, xd, -kd);
  const double s = __longlong_as_double(static_cast<long long>(__ldg(&kExp2Table[ki % 32]) + (ki << 47)));
  const double z = __fma_rn(kC0, r, kC1);
  const double r2 = __dmul_rn(r, r);
  const double y = __fma_rn(z, r2, __fma_rn(kC2, r, 1.0));
  return __double2float_rn(__dmul_rn(y, s));
}

}  // namespace dsv4::cuda
