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
// Plain C++ (core/host_device.h): the CPU tests check both forms against the formats' definitions.
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

// Eight bytes (lo: bytes 0-3, hi: 4-7) by parity: even = bytes 0, 2, 4, 6 and odd = 1, 3, 5, 7.
DSV4_HOST_DEVICE ParityWords bytes_by_parity(uint32_t lo, uint32_t hi) {
#if defined(__CUDA_ARCH__)
  return {__byte_perm(lo, hi, 0x6420), __byte_perm(lo, hi, 0x7531)};
#else
  const uint64_t v = (uint64_t{hi} << 32) | lo;
  ParityWords r{0, 0};
  for (int i = 0; i < 4; ++i) {
    r.even |= static_cast<uint32_t>((v >> (16 * i)) & 0xff) << (8 * i);
    r.odd |= static_cast<uint32_t>((v >> (16 * i + 8)) & 0xff) << (8 * i);
  }
  return r;
#endif
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

}  // namespace dsv4::cuda
