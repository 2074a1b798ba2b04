// The CPU backend's std::log1p(float), reproduced bit for bit: glibc's log1pf, the fdlibm-derived
// sysdeps/ieee754/flt-32/s_log1pf.c (1 + x = 2^k·(1 + f) with a correction term c, then a polynomial
// in s = f/(2 + f)). glibc 2.36 on x86-64 has one build of it (no ifunc, no FMA variant): every fp32
// operation rounds on its own, which the device spells with _rn intrinsics so that nvcc cannot
// contract them. The fp64 log1p rounded to fp32 differs from it by one ulp on ~0.4% of arguments,
// which moves MoE gate weights. Checked against glibc 2.36 on all 2^32 floats, NaN payloads included;
// host-callable so that such a check can run anywhere (host builds must not contract into FMAs).
#pragma once

#include <cstdint>

namespace dsv4::cuda {
namespace log1pf_detail {

#ifdef __CUDA_ARCH__
__device__ __forceinline__ float fadd(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float fsub(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ float fmul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float fdiv(float a, float b) { return __fdiv_rn(a, b); }
#else
inline float fadd(float a, float b) { return a + b; }
inline float fsub(float a, float b) { return a - b; }
inline float fmul(float a, float b) { return a * b; }
inline float fdiv(float a, float b) { return a / b; }
#endif

__host__ __device__ inline float from_bits(uint32_t u) { return __builtin_bit_cast(float, u); }

constexpr float kLn2Hi = 0x1.62e3p-1f, kLn2Lo = 0x1.2fefa2p-17f;
constexpr float kLp1 = 0x1.555556p-1f, kLp2 = 0x1.99999ap-2f, kLp3 = 0x1.24924ap-2f, kLp4 = 0x1.c71c52p-3f,
                kLp5 = 0x1.74664ap-3f, kLp6 = 0x1.39a09ep-3f, kLp7 = 0x1.2f112ep-3f;
constexpr uint32_t kQuiet = 0x00400000u, kDefaultNan = 0xffc00000u;  // x86's NaN of an invalid operation

}  // namespace log1pf_detail

__host__ __device__ inline float host_log1pf(float x) {
  using namespace log1pf_detail;
  const auto ux = __builtin_bit_cast(uint32_t, x);
  const auto hx = static_cast<int32_t>(ux);
  const int32_t ax = hx & 0x7fffffff;
  int k = 1;
  int32_t hu = 0;
  float f = 0.0f, c = 0.0f;
  if (hx < 0x3ed413d7) {                                              // x < 0.41422
    if (ax >= 0x3f800000) {                                           // x <= -1, or a negative NaN
      if (x == -1.0f) return from_bits(0xff800000u);                  // -two25 / 0 = -inf
      return from_bits(ax > 0x7f800000 ? ux | kQuiet : kDefaultNan);  // (x - x) / (x - x)
    }
    if (ax < 0x31000000) {  // |x| < 2^-29
      if (ax < 0x24800000) return x;
      return fsub(x, fmul(fmul(x, x), 0.5f));
    }
    if (hx > 0 || hx <= static_cast<int32_t>(0xbe95f61fu)) {  // -0.2929 < x < 0.41422
      k = 0;
      f = x;
      hu = 1;
    }
  }
  if (hx >= 0x7f800000) return from_bits(ax > 0x7f800000 ? ux | kQuiet : ux);  // x + x
  if (k != 0) {
    float u;
    if (hx < 0x5a000000) {
      u = fadd(1.0f, x);
      hu = static_cast<int32_t>(__builtin_bit_cast(uint32_t, u));
      k = (hu >> 23) - 127;
      c = k > 0 ? fsub(1.0f, fsub(u, x)) : fsub(x, fsub(u, 1.0f));  // the correction term
      c = fdiv(c, u);
    } else {
      u = x;
      hu = hx;
      k = (hu >> 23) - 127;
      c = 0.0f;
    }
    hu &= 0x007fffff;
    if (hu < 0x3504f7) {
      u = from_bits(static_cast<uint32_t>(hu) | 0x3f800000u);  // u in [1, sqrt2)
    } else {
      k += 1;
      u = from_bits(static_cast<uint32_t>(hu) | 0x3f000000u);  // u/2 in [sqrt2/2, 1)
      hu = (0x00800000 - hu) >> 2;
    }
    f = fsub(u, 1.0f);
  }
  const float hfsq = fmul(fmul(0.5f, f), f);
  const auto kf = static_cast<float>(k);
  if (hu == 0) {  // |f| < 2^-20
    if (f == 0.0f) return k == 0 ? 0.0f : fadd(fadd(fmul(kf, kLn2Lo), c), fmul(kf, kLn2Hi));
    const float r = fmul(hfsq, fsub(1.0f, fmul(kLp1, f)));
    if (k == 0) return fsub(f, r);
    return fsub(fmul(kf, kLn2Hi), fsub(fsub(r, fadd(fmul(kf, kLn2Lo), c)), f));
  }
  const float s = fdiv(f, fadd(2.0f, f));
  const float z = fmul(s, s);
  float r = fadd(kLp6, fmul(z, kLp7));
  r = fadd(kLp5, fmul(z, r));
  r = fadd(kLp4, fmul(z, r));
  r = fadd(kLp3, fmul(z, r));
  r = fadd(kLp2, fmul(z, r));
  r = fadd(kLp1, fmul(z, r));
  r = fmul(z, r);
  const float sr = fmul(s, fadd(hfsq, r));
  if (k == 0) return fsub(f, fsub(hfsq, sr));
  return fsub(fmul(kf, kLn2Hi), fsub(fsub(hfsq, fadd(sr, fadd(fmul(kf, kLn2Lo), c))), f));
}

}  // namespace dsv4::cuda
