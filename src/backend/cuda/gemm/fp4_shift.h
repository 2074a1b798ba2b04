// FP4 weight operands for the FP8 MMA by shifts and masks (GemmPolicy::fp4_shift_decode): the few-row
// and mma.sync kernels, whose FP4 paths are bound by the integer instructions that turn codes and scale
// bytes into operands (docs/perf.md, the Nsight rows), decode them here in about half as many.
//
// Codes: the e2m1 magnitude bits (e1 e0 m) moved to bits 4..2 of a byte are the e4m3 code of that value
// times 2^-6, for all eight magnitudes (0.5 -> 0x04 = 2^-7, subnormal; 6 -> 0x1c = 1.5 x 2^-4); the sign
// goes to bit 7. A kernel puts the 2^6 back into the activation scale (a multiplication by 64 is exact),
// so the MMA sums the table form's products times 2^-6 and the promoted sums keep the same bits. One
// word of eight codes (nibble i = K offset i) gives two e4m3 words by nibble parity, codes 0, 2, 4, 6
// and 1, 3, 5, 7; the activation's eight bytes are split the same way (bytes_by_parity), so both
// operands still pair each K index with itself (the K order inside one MMA is free).
//
// Scales: the fp32 bits of ue8m0 byte b of a word (2^(e - 127), with 0 -> 2^-127 and 255 -> NaN, as the
// CPU's ue8m0_to_float) are the byte shifted into the exponent field plus a quiet bit for the two
// special bytes, found for all four bytes of the word at once.
//
// FP4 per 128 (the wgmma kernel's form, widened in shared memory): a 32-wide block with scale byte e in a
// 128-block whose largest byte is `top` becomes e5m2 codes of its values times 2^(e - top + 13). The
// magnitudes come from a table word whose entries already carry the block's 4·shift in their exponent
// field (one table a block instead of an addition a code; zero stays zero), the signs from a second
// word that is empty for a block out of reach (shift below -13: zeros, as the wgmma kernel reports).
// The cuBLASLt route's re-encoding to e4m3 (lt_experts.h) takes the same table form with e4m3 entries.
//
// Plain C++ (core/host_device.h): the CPU tests check every form against the formats' definitions.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace dsv4::cuda {

struct ParityWords {
  uint32_t even;  // bytes from codes (or bytes) 0, 2, 4, 6
  uint32_t odd;   // from 1, 3, 5, 7
};

// Eight e2m1 codes (nibble i = code i) as e4m3 bytes of 2^-6 times their values, by nibble parity.
DSV4_HOST_DEVICE ParityWords e2m1x8_e4m3_shifted(uint32_t v) {
  return {((v << 2) & 0x1c1c1c1cu) | ((v << 4) & 0x80808080u), ((v >> 2) & 0x1c1c1c1cu) | (v & 0x80808080u)};
}

// byte_perm(x, y, s): byte i of the result is byte (s >> 4i) & 7 of y:x (x bytes 0-3, y bytes 4-7);
// selector nibbles below 8 only (no sign replication), as every caller here passes.
DSV4_HOST_DEVICE uint32_t byte_perm(uint32_t x, uint32_t y, uint32_t s) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(x, y, s);
#else
  const uint64_t v = (uint64_t{y} << 32) | x;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= static_cast<uint32_t>((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
  return r;
#endif
}

// Eight bytes (lo: bytes 0-3, hi: 4-7) by parity: even = bytes 0, 2, 4, 6 and odd = 1, 3, 5, 7.
DSV4_HOST_DEVICE ParityWords bytes_by_parity(uint32_t lo, uint32_t hi) {
  return {byte_perm(lo, hi, 0x6420u), byte_perm(lo, hi, 0x7531u)};
}

// Bit 7 of each byte of a word of ue8m0 scales that is 0x00 or 0xff (all its bits equal).
DSV4_HOST_DEVICE uint32_t ue8m0_specials(uint32_t sw) {
  const uint32_t t = (sw ^ (sw >> 1)) & 0x7f7f7f7fu;  // zero exactly in the bytes whose bits are all equal
  return ~(t + 0x7f7f7f7fu) & 0x80808080u;            // no carry leaves a byte: t <= 0x7f there
}

// fp32 bits of ue8m0 byte b (0-3; a constant once a kernel's loop unrolls) of sw, specials from above.
DSV4_HOST_DEVICE uint32_t ue8m0_bits(uint32_t sw, uint32_t specials, int b) {
  const uint32_t exponent = (b < 3 ? sw << (23 - 8 * b) : sw >> 1) & 0x7f800000u;
  const uint32_t quiet = (b < 2 ? specials << (15 - 8 * b) : specials >> (8 * b - 15)) & 0x00400000u;
  return exponent | quiet;
}

// A 32-wide block's table words: the FP8 codes of its eight e2m1 magnitudes times 2^shift.
struct Fp8Table {
  uint32_t lo;    // codes of 2^shift x {0, 0.5, 1, 1.5}
  uint32_t hi;    // of 2^shift x {2, 3, 4, 6}
  uint32_t sign;  // 0x80 in every byte, or 0 past the reach
};

// e5m2, FP4 per 128: shift = e - top + 13 (at most 13).
DSV4_HOST_DEVICE Fp8Table e5m2_table(int shift) {
  if (shift < -13) return {0u, 0u, 0u};
  // 4·shift added to every nonzero entry's exponent field: entries stay within 0x04..0x7a, so no byte
  // carries or borrows (unsigned arithmetic wraps a negative step exactly).
  const uint32_t step = static_cast<uint32_t>(4 * shift);
  return {0x3e3c3800u + step * 0x01010100u, 0x46444240u + step * 0x01010101u, 0x80808080u};
}

struct HalfWords {
  uint32_t lo;  // bytes from codes 0-3
  uint32_t hi;  // from codes 4-7
};

// e4m3 code of num·2^exp2 (num 1 or 3), a value e4m3 holds: normal from 2^-6, else a multiple of 2^-9.
DSV4_HOST_DEVICE uint32_t e4m3_of(uint32_t num, int exp2) {
  const int lg = num == 1 ? exp2 : exp2 + 1;  // 3·2^k = 1.5·2^(k+1)
  if (lg >= -6) return (static_cast<uint32_t>(lg + 7) << 3) | (num == 1 ? 0u : 4u);
  return exp2 >= -9 ? num << (exp2 + 9) : 0u;
}

// e4m3, the cuBLASLt route's exact re-encoding (lt_experts.h): shift = e - top, from -8 to 6. From -5 up
// every nonzero entry is normal and gets 8·shift added to its exponent field (entries stay within
// 0x08..0x7c: no byte carries or borrows); below, 0.5·2^shift is subnormal and each entry is made alone.
DSV4_HOST_DEVICE Fp8Table e4m3_table(int shift) {
  if (shift >= -5) {
    const uint32_t step = static_cast<uint32_t>(8 * shift);
    return {0x3c383000u + step * 0x01010100u, 0x4c484440u + step * 0x01010101u, 0x80808080u};
  }
  return {
      (e4m3_of(1, shift - 1) << 8) | (e4m3_of(1, shift) << 16) | (e4m3_of(3, shift - 1) << 24),
      e4m3_of(1, shift + 1) | (e4m3_of(3, shift) << 8) | (e4m3_of(1, shift + 2) << 16) | (e4m3_of(3, shift + 1) << 24),
      0x80808080u};
}

// Eight e2m1 codes (nibble i = code i) as eight FP8 bytes by a block's table, in K order.
DSV4_HOST_DEVICE HalfWords e2m1x8_by_table(uint32_t v, const Fp8Table& t) {
  const uint32_t mag = v & 0x77777777u, sign = (v >> 1) & 0x44444444u;  // sign nibble 4 picks t.sign's byte
  return {byte_perm(t.lo, t.hi, mag) | byte_perm(0u, t.sign, sign),
          byte_perm(t.lo, t.hi, mag >> 16) | byte_perm(0u, t.sign, sign >> 16)};
}

// The largest and smallest byte of a word (FP4 per 128: a row block's four scale bytes).
DSV4_HOST_DEVICE uint32_t max_byte(uint32_t w) {
  uint32_t a = w & 0xffu, b = (w >> 8) & 0xffu, c = (w >> 16) & 0xffu, d = w >> 24;
  a = a > b ? a : b, c = c > d ? c : d;
  return a > c ? a : c;
}
DSV4_HOST_DEVICE uint32_t min_byte(uint32_t w) {
  uint32_t a = w & 0xffu, b = (w >> 8) & 0xffu, c = (w >> 16) & 0xffu, d = w >> 24;
  a = a < b ? a : b, c = c < d ? c : d;
  return a < c ? a : c;
}

// fp32 bits of a row block's scale 2^(top - 127 - 13) (NaN for top 255; subnormal below top 14).
DSV4_HOST_DEVICE uint32_t fp4_block_scale_bits(uint32_t top) {
  return top == 255u ? 0x7fc00000u : top >= 14u ? (top - 13u) << 23 : 1u << (top + 9u);
}

}  // namespace dsv4::cuda
