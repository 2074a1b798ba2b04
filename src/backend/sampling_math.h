// The sample op's per-row and per-edit parameters (backend/ops.h SampleParams) and the pieces of its
// math that must give the same bits on the host and on the device. Written once for both (nvcc
// compiles these as __host__ __device__, core/host_device.h; no fmt, no libm): the CPU backend and the CUDA kernels
// call the same functions, so their tokens agree exactly.
//  * exp: a portable exp (Cody-Waite reduction, degree-13 Taylor, no fused multiply-add), not libm's
//    or CUDA's, which differ from each other in the last bit on some inputs.
//  * Masses: the draw and top-p add weights as exact integers, floor(w · 2^44), so a sum does not
//    depend on its order and a sequential CPU loop and a parallel GPU scan give the same totals.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/host_device.h"

namespace dsv4 {

// One row of the sample op.
struct SampleRow {
  double temperature = 0;  // 0: greedy (the first maximum of the edited logits); else > 0
  int64_t top_k = 0;       // 0: all
  double top_p = 1;        // (0, 1]
  double min_p = 0;        // [0, 1], relative to the most likely id's weight of 1
  double u = 0;            // [0, 1): the row's uniform draw (used to 53 bits; ignored when greedy)
  int32_t edit_begin = 0;  // the row's edits: [edit_begin, edit_end) of SampleParams::edits
  int32_t edit_end = 0;
  int32_t logprobs = -1;  // -1: none; n >= 0: the chosen id's raw logprob and the n most likely raw ids
  // The row's allow-set: row allow_row of SampleParams::allow (-1: every id). Ids outside it are −inf
  // after the edits, so a request's constraints (allowed_token_ids, later a grammar) need no edit per id.
  int32_t allow_row = -1;
  // >= 0: the row's token is this id, not drawn (a prompt token scored: its logprob and rank, the most
  // likely ids); the edits, allow-set and temperature do not apply to it.
  int32_t force_id = -1;
};

// Bit i of an allow-set (ceil(limit / 32) words, id i in word i / 32, bit i % 32): id i may be sampled.
DSV4_HOST_DEVICE bool allows(const uint32_t* words, int64_t i) { return ((words[i >> 5] >> (i & 31)) & 1u) != 0; }

// One change to one logit z (fp64): z = −inf when mask, else (z > 0 ? z / pos_div : z · neg_mul) + add.
// A division (not a multiplication by the inverse) because the repetition penalty divides.
struct SampleEdit {
  int32_t id = 0;
  bool mask = false;
  double pos_div = 1;
  double neg_mul = 1;
  double add = 0;
};

inline constexpr int32_t kSampleMaxLogprobs = 20;
inline constexpr int kSampleMassBits = 44;
// So that any sum of masses (each <= 2^44) fits in 64 bits.
inline constexpr int64_t kSampleMaxLimit = int64_t{1} << 19;

namespace sampling {

__extension__ typedef unsigned __int128 u128;

// Plain IEEE operations, never contracted into FMAs (the CPU backend builds with -ffp-contract=off).
DSV4_HOST_DEVICE double add(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
DSV4_HOST_DEVICE double sub(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}
DSV4_HOST_DEVICE double mul(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
DSV4_HOST_DEVICE double div(double a, double b) {
#ifdef __CUDA_ARCH__
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
DSV4_HOST_DEVICE uint64_t bits_of(double v) {
#ifdef __CUDA_ARCH__
  return static_cast<uint64_t>(__double_as_longlong(v));
#else
  uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
#endif
}
DSV4_HOST_DEVICE double from_bits(uint64_t b) {
#ifdef __CUDA_ARCH__
  return __longlong_as_double(static_cast<long long>(b));
#else
  double v;
  std::memcpy(&v, &b, sizeof v);
  return v;
#endif
}

DSV4_HOST_DEVICE double infinity() { return from_bits(0x7ff0000000000000ull); }
// 2^e for -1022 <= e <= 1023.
DSV4_HOST_DEVICE double pow2(int e) { return from_bits(static_cast<uint64_t>(e + 1023) << 52); }

// e^x within a few ulp, identical wherever IEEE doubles are: x = k·ln2 + r (|r| <= ln2/2, ln2 split
// so that k·hi is exact), e^r by Taylor to r^13 (truncation < 0.1 ulp), then · 2^k in at most two exact
// steps and one rounding. NaN stays NaN.
DSV4_HOST_DEVICE double exp(double x) {
  if (x != x) return x;
  if (x < -746.0) return 0.0;  // below half the smallest subnormal
  if (x > 709.8) return infinity();
  constexpr double kInvLn2 = 0x1.71547652b82fep+0, kShift = 0x1.8p+52;
  constexpr double kLn2Hi = 0x1.62e42fee00000p-1, kLn2Lo = 0x1.a39ef35793c76p-33;
  const double kd = sub(add(mul(x, kInvLn2), kShift), kShift);  // round to nearest integer
  const int k = static_cast<int>(kd);
  const double r = sub(sub(x, mul(kd, kLn2Hi)), mul(kd, kLn2Lo));
  // 1/n! for n = 13 down to 0, Horner in r.
  double p = 0x1.6124613a86d09p-33;
  p = add(mul(p, r), 0x1.1eed8eff8d898p-29);
  p = add(mul(p, r), 0x1.ae64567f544e4p-26);
  p = add(mul(p, r), 0x1.27e4fb7789f5cp-22);
  p = add(mul(p, r), 0x1.71de3a556c734p-19);
  p = add(mul(p, r), 0x1.a01a01a01a01ap-16);
  p = add(mul(p, r), 0x1.a01a01a01a01ap-13);
  p = add(mul(p, r), 0x1.6c16c16c16c17p-10);
  p = add(mul(p, r), 0x1.1111111111111p-7);
  p = add(mul(p, r), 0x1.5555555555555p-5);
  p = add(mul(p, r), 0x1.5555555555555p-3);
  p = add(mul(p, r), 0x1p-1);
  p = add(mul(p, r), 1.0);
  p = add(mul(p, r), 1.0);
  // The first product is exact; the second rounds once (into subnormals or to infinity).
  if (k > 1023) return mul(mul(p, pow2(k - 100)), pow2(100));
  if (k < -1022) return mul(mul(p, pow2(k + 200)), pow2(-200));
  return mul(p, pow2(k));
}

// One edit applied to z.
DSV4_HOST_DEVICE double apply_edit(double z, const SampleEdit& e) {
  if (e.mask) return -infinity();
  return add(z > 0 ? div(z, e.pos_div) : mul(z, e.neg_mul), e.add);
}

// NaN logits count as −inf everywhere.
DSV4_HOST_DEVICE double no_nan(double z) { return z != z ? -infinity() : z; }

// exp((z − zmax)/T), exactly 1 at the maximum (also when zmax is +inf).
DSV4_HOST_DEVICE double weight(double z, double zmax, double temperature) {
  return z == zmax ? 1.0 : exp(div(sub(z, zmax), temperature));
}

// The integer mass of a weight w in [0, 1]: floor(w · 2^44).
DSV4_HOST_DEVICE uint64_t mass(double w) {
  return static_cast<uint64_t>(mul(w, static_cast<double>(uint64_t{1} << kSampleMassBits)));
}

// ceil(p · total) exactly, for p in (0, 1].
DSV4_HOST_DEVICE uint64_t top_p_need(double p, uint64_t total) {
  const uint64_t b = bits_of(p);
  const int e = static_cast<int>((b >> 52) & 0x7ff);
  const uint64_t m = b & ((uint64_t{1} << 52) - 1);
  const uint64_t mant = e == 0 ? m : m | (uint64_t{1} << 52);
  const int shift = e == 0 ? 1074 : 1075 - e;  // p = mant · 2^-shift
  const u128 prod = static_cast<u128>(mant) * total;
  if (shift >= 128) return prod != 0 ? 1 : 0;
  u128 q = prod >> shift;
  if ((q << shift) != prod) ++q;
  return static_cast<uint64_t>(q);
}

// floor(U · total / 2^53) with U = floor(u · 2^53): the first id whose running mass exceeds it is drawn.
DSV4_HOST_DEVICE uint64_t draw_target(double u, uint64_t total) {
  const uint64_t uu = static_cast<uint64_t>(mul(u, 0x1p+53));
  return static_cast<uint64_t>((static_cast<u128>(uu) * total) >> 53);
}

// A total order on raw logits as unsigned keys: larger value, larger key; −0 = +0; NaN = −inf.
DSV4_HOST_DEVICE uint32_t raw_key(float v) {
  uint32_t b;
#ifdef __CUDA_ARCH__
  b = __float_as_uint(v);
#else
  std::memcpy(&b, &v, sizeof b);
#endif
  if (v != v) b = 0xff800000u;  // -inf
  if (v == 0.0f) b = 0;         // +0
  return (b & 0x80000000u) ? ~b : b | 0x80000000u;
}

}  // namespace sampling
}  // namespace dsv4
