// The CPU backend's std::sin(float) / std::cos(float), reproduced bit for bit: glibc's sinf/cosf
// (its FMA variant, which x86-64 CPUs with FMA run; the constants and fused operations read off that
// build). The double-precision cos/sin rounded to fp32 differs from them on ~1% of arguments, which
// changes RoPE outputs. Checked against glibc 2.36's sinf, cosf and sincosf (what GCC makes of
// rotary.cpp's sin + cos) on every float; host-callable so that such a check can run anywhere.
#pragma once

#include <cstdint>

namespace dsv4::cuda {
namespace sincosf_detail {

#ifdef __CUDA_ARCH__
__device__ __forceinline__ double dmul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ double dfma(double a, double b, double c) { return __fma_rn(a, b, c); }
#else
inline double dmul(double a, double b) { return a * b; }
inline double dfma(double a, double b, double c) { return __builtin_fma(a, b, c); }
#endif

// 4/pi in overlapping 32-bit windows (glibc's __inv_pio4), for the large-argument reduction.
#ifdef __CUDA_ARCH__
static __device__ const uint32_t kInvPio4[24] = {
#else
inline constexpr uint32_t kInvPio4[24] = {
#endif
    0xa2,       0xa2f9,     0xa2f983,   0xa2f9836e, 0xf9836e4e, 0x836e4e44, 0x6e4e4415, 0x4e441529,
    0x441529fc, 0x1529fc27, 0x29fc2757, 0xfc2757d1, 0x2757d1f5, 0x57d1f534, 0xd1f534dd, 0xf534ddc0,
    0x34ddc0db, 0xddc0db62, 0xc0db6295, 0xdb629599, 0x6295993c, 0x95993c43, 0x993c4390, 0x3c439041};

// __sincosf_table[0]; table[1] is the same with the cosine coefficients negated.
constexpr double kHpiInv = 0x1.45f306dc9c883p+23, kHpi = 0x1.921fb54442d18p+0, kPi63 = 0x1.921fb54442d18p-62;
constexpr double kC0 = 1.0, kC1 = -0x1.ffffffd0c621cp-2, kC2 = 0x1.55553e1068f19p-5, kC3 = -0x1.6c087e89a359dp-10,
                 kC4 = 0x1.99343027bf8c3p-16;
constexpr double kS1 = -0x1.555545995a603p-3, kS2 = 0x1.1107605230bc4p-7, kS3 = -0x1.994eb3774cf24p-13;

// sinf_poly with the FMA contractions GCC made in glibc's FMA build.
__host__ __device__ inline double sin_poly(double x, double x2) {
  const double s1 = dfma(x2, kS3, kS2);
  const double x3 = dmul(x2, x);
  const double x5 = dmul(x2, x3);
  return dfma(s1, x5, dfma(x3, kS1, x));
}
__host__ __device__ inline double cos_poly(double x2) {
  const double x4 = dmul(x2, x2);
  const double c1 = dfma(x2, kC1, kC0), c2 = dfma(x2, kC4, kC3);
  const double x6 = dmul(x2, x4);
  return dfma(c2, x6, dfma(x4, kC2, c1));
}

__host__ __device__ inline uint32_t inv_pio4(int i) {
#ifdef __CUDA_ARCH__
  return __ldg(&kInvPio4[i]);
#else
  return kInvPio4[i];
#endif
}

// x mod pi/2 for |y| >= 120 from the bits of y (exact integer product with 4/pi); n = quadrant.
__host__ __device__ inline double reduce_large(uint32_t xi, int& n) {
  const int a = static_cast<int>((xi >> 26) & 15u);
  const int shift = static_cast<int>((xi >> 23) & 7u);
  const uint32_t m = ((xi & 0x7fffffu) | 0x800000u) << shift;
  uint64_t r0 = m * inv_pio4(a);  // a 32-bit product, as in glibc
  const uint64_t r1 = uint64_t{m} * inv_pio4(a + 4), r2 = uint64_t{m} * inv_pio4(a + 8);
  r0 = (r2 >> 32) | (r0 << 32);
  r0 += r1;
  const uint64_t q = (r0 + (uint64_t{1} << 61)) >> 62;
  r0 -= q << 62;
  n = static_cast<int>(q);
  return dmul(static_cast<double>(static_cast<int64_t>(r0)), kPi63);
}

// The reduced argument r and the quadrant (with the sign of y folded in for the large path).
__host__ __device__ inline double reduce(float y, double x, int& quadrant, int& n) {
  const uint32_t top = (__builtin_bit_cast(uint32_t, y) >> 20) & 0x7ffu;
  if (top < 0x42fu) {  // top12(|y|) < top12(120)
    n = (static_cast<int32_t>(dmul(x, kHpiInv)) + 0x800000) >> 24;
    quadrant = n;
    return dfma(-static_cast<double>(n), kHpi, x);
  }
  const uint32_t xi = __builtin_bit_cast(uint32_t, y);
  const double r = reduce_large(xi, n);
  quadrant = n + static_cast<int>(xi >> 31);
  return r;
}

// sin (want_cos false) or cos of y for pi/4 <= |y| < inf.
__host__ __device__ inline float reduced(float y, bool want_cos) {
  int quadrant = 0, n = 0;
  const double r = reduce(y, static_cast<double>(y), quadrant, n);
  const double x2 = dmul(r, r);
  if ((n & 1) == static_cast<int>(want_cos)) {  // the sine polynomial
    const double s = (quadrant & 3) == 1 || (quadrant & 3) == 2 ? -1.0 : 1.0;
    return static_cast<float>(sin_poly(dmul(r, s), x2));
  }
  const double c = cos_poly(x2);
  return static_cast<float>((quadrant & 2) ? -c : c);
}

}  // namespace sincosf_detail

__host__ __device__ inline float host_sinf(float y) {
  using namespace sincosf_detail;
  const uint32_t top = (__builtin_bit_cast(uint32_t, y) >> 20) & 0x7ffu;
  if (top < 0x3f4u) {  // top12(|y|) < top12(pi/4)
    if (top < 0x398u) return y;
    const double x = y;
    return static_cast<float>(sin_poly(x, dmul(x, x)));
  }
  if (top >= 0x7f8u) return y - y;  // inf, nan
  return reduced(y, false);
}

__host__ __device__ inline float host_cosf(float y) {
  using namespace sincosf_detail;
  const uint32_t top = (__builtin_bit_cast(uint32_t, y) >> 20) & 0x7ffu;
  if (top < 0x3f4u) {  // top12(|y|) < top12(pi/4)
    if (top < 0x398u) return 1.0f;
    const double x = y;
    return static_cast<float>(cos_poly(dmul(x, x)));
  }
  if (top >= 0x7f8u) return y - y;
  return reduced(y, true);
}

}  // namespace dsv4::cuda
