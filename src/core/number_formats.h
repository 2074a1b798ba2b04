// Scalar number formats of DeepSeek-V4 (MODEL.md §2.1): bf16, FP8 e4m3fn, UE8M0, FP4 e2m1.
// Encoders round to nearest, ties to even, and saturate; decoders are exact.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace dsv4 {

// ---- bf16 -----------------------------------------------------------------------------------

inline float bf16_to_float(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

inline uint16_t float_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// bf16(x) as a float: the rounding point the reference applies between ops.
inline float round_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

// ---- FP8 e4m3fn: bias 7, 3 mantissa bits, max 448, no infinities, 0x7f/0xff are NaN ----------

constexpr float kE4M3Max = 448.0f;

inline float e4m3_to_float(uint8_t c) {
  const int exp = (c >> 3) & 0xf;
  const int man = c & 7;
  float mag;
  if (exp == 0xf && man == 7) {
    mag = NAN;
  } else if (exp == 0) {
    mag = std::ldexp(static_cast<float>(man), -9);
  } else {
    mag = std::ldexp(1.0f + static_cast<float>(man) / 8.0f, exp - 7);
  }
  return (c & 0x80) ? -mag : mag;
}

// Round to nearest even, saturating at ±448 (CUDA cvt.rn.satfinite). NaN maps to 0x7f.
inline uint8_t float_to_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  float a = std::fabs(f);
  if (a >= kE4M3Max) return sign | 0x7e;
  if (a < 0.015625f) {  // below 2^-6: subnormal grid of step 2^-9 (code 8 is 2^-6 itself)
    return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f));
  }
  uint32_t u = std::bit_cast<uint32_t>(a);
  u += 0x7ffffu + ((u >> 20) & 1u);  // round the 23-bit mantissa to 3 bits
  const int exp = static_cast<int>(u >> 23) - 127 + 7;
  const uint32_t code = (static_cast<uint32_t>(exp) << 3) | ((u >> 20) & 7u);
  return sign | static_cast<uint8_t>(code > 0x7e ? 0x7e : code);
}

// ---- UE8M0: one byte e, value 2^(e-127); 255 is NaN --------------------------------------------

inline float ue8m0_to_float(uint8_t e) {
  if (e == 255) return NAN;
  return std::bit_cast<float>(e == 0 ? 0x00400000u : static_cast<uint32_t>(e) << 23);
}

// The smallest power of two >= v for a positive normal fp32 v, as a UE8M0 byte:
// biased exponent plus one when any mantissa bit is set (MODEL.md §2.2 step 3).
inline uint8_t ue8m0_ceil_pow2(float v) {
  const uint32_t u = std::bit_cast<uint32_t>(v);
  const uint32_t e = (u >> 23) & 0xffu;
  return static_cast<uint8_t>(e + ((u & 0x7fffffu) != 0 ? 1u : 0u));
}

// ---- FP4 e2m1: sign bit 3, magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 -------------------------------

constexpr float kE2M1Max = 6.0f;
constexpr float kE2M1Values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

inline float e2m1_to_float(uint8_t code) {
  const float m = kE2M1Values[code & 7];
  return (code & 8) ? -m : m;
}

// Round to nearest, ties to the even code, saturating at ±6 (NaN -> code 7). Returns a 4-bit code.
// The code is the count of midpoints below |f|; a tie counts (>=) when the code above it is even and
// not (>) when the code below it is. Branch-free, so random weights quantize at memory speed.
inline uint8_t float_to_e2m1(float f) {
  const uint8_t sign = std::signbit(f) ? 8 : 0;
  const float a = std::fabs(f);
  if (a != a) return sign | 7;
  const int c = (a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) + (a >= 3.5f) + (a > 5.0f);
  return static_cast<uint8_t>(sign | c);
}

// Packed FP4 pairs: element 2j in the low nibble of byte j, element 2j+1 in the high nibble.
inline uint8_t fp4_at(const uint8_t* packed, int64_t k) {
  const uint8_t b = packed[k >> 1];
  return (k & 1) ? static_cast<uint8_t>(b >> 4) : static_cast<uint8_t>(b & 0xf);
}

}  // namespace dsv4
