// The FP4 operands by shifts (backend/cuda/gemm/fp4_shift.h) against the formats' definitions
// (core/number_formats.h): the kernels' decoding, checked without a GPU.
#include "backend/cuda/gemm/fp4_shift.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>

#include "core/number_formats.h"

namespace dsv4::cuda {
namespace {

uint8_t byte_of(uint32_t w, int i) { return static_cast<uint8_t>(w >> (8 * i)); }

// Byte i of the eight a word of codes widens to (nibble i's e4m3 byte).
uint8_t widened(const ParityWords& p, int i) { return byte_of(i % 2 == 0 ? p.even : p.odd, i / 2); }

void expect_codes_widen(uint32_t v) {
  const ParityWords p = e2m1x8_e4m3_shifted(v);
  for (int i = 0; i < 8; ++i) {
    const uint8_t code = (v >> (4 * i)) & 15u;
    const float want = std::ldexp(e2m1_to_float(code), -6), got = e4m3_to_float(widened(p, i));
    ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want))
        << "word " << std::hex << v << " nibble " << i << " code " << int{code};
  }
}

TEST(Fp4Shift, EveryCodeInEveryNibbleWidensToItsValueTimesTwoToTheMinusSix) {
  std::mt19937 rng(11);
  for (int i = 0; i < 8; ++i) {
    for (uint32_t code = 0; code < 16; ++code) {
      for (int rep = 0; rep < 64; ++rep) {  // the other nibbles random: no bit may leak between them
        const uint32_t v = (rng() & ~(15u << (4 * i))) | (code << (4 * i));
        expect_codes_widen(v);
      }
    }
  }
  for (int rep = 0; rep < 100000; ++rep) expect_codes_widen(rng());
  expect_codes_widen(0xffffffffu);
  expect_codes_widen(0x88888888u);  // eight negative zeros
}

TEST(Fp4Shift, BytesSplitByParity) {
  std::mt19937 rng(12);
  for (int rep = 0; rep < 10000; ++rep) {
    const uint32_t lo = rng(), hi = rng();
    const ParityWords p = bytes_by_parity(lo, hi);
    for (int i = 0; i < 8; ++i) {
      const uint8_t want = i < 4 ? byte_of(lo, i) : byte_of(hi, i - 4);
      ASSERT_EQ(widened(p, i), want) << "byte " << i;
    }
  }
}

// What the kernels rely on: an MMA's K slots filled with the parity words of a weight word and of its
// activation bytes sum the same products as the codes against the bytes in order, times 2^-6.
TEST(Fp4Shift, ParityOperandsPairEveryKIndexWithItself) {
  std::mt19937 rng(13);
  for (int rep = 0; rep < 20000; ++rep) {
    const uint32_t codes = rng(), lo = rng(), hi = rng();
    double want = 0;
    for (int i = 0; i < 8; ++i) {
      const uint8_t a = i < 4 ? byte_of(lo, i) : byte_of(hi, i - 4);
      if ((a & 0x7f) == 0x7f) continue;  // e4m3 NaN: not an activation code
      want += static_cast<double>(e2m1_to_float((codes >> (4 * i)) & 15u)) * e4m3_to_float(a);
    }
    const ParityWords w = e2m1x8_e4m3_shifted(codes), a = bytes_by_parity(lo, hi);
    double got = 0;
    for (int j = 0; j < 4; ++j) {
      for (const auto& [wj, aj] : {std::pair{w.even, a.even}, std::pair{w.odd, a.odd}}) {
        const uint8_t ab = byte_of(aj, j);
        if ((ab & 0x7f) == 0x7f) continue;
        got += static_cast<double>(e4m3_to_float(byte_of(wj, j))) * e4m3_to_float(ab);
      }
    }
    ASSERT_EQ(std::ldexp(got, 6), want) << std::hex << codes << " " << lo << " " << hi;
  }
}

void expect_scales(uint32_t sw) {
  const uint32_t specials = ue8m0_specials(sw);
  for (int b = 0; b < 4; ++b) {
    const uint32_t want = std::bit_cast<uint32_t>(ue8m0_to_float(byte_of(sw, b)));
    ASSERT_EQ(ue8m0_bits(sw, specials, b), want) << "word " << std::hex << sw << " byte " << b;
  }
}

TEST(Fp4Shift, EveryScaleByteInEveryPositionGivesTheCpusFloat) {
  std::mt19937 rng(14);
  const uint32_t fills[] = {0x00000000u, 0xffffffffu, 0x7f7f7f7fu, 0x80808080u, 0x01fe00ffu};
  for (int b = 0; b < 4; ++b) {
    for (uint32_t e = 0; e < 256; ++e) {
      for (const uint32_t fill : fills) expect_scales((fill & ~(255u << (8 * b))) | (e << (8 * b)));
      for (int rep = 0; rep < 64; ++rep) expect_scales((rng() & ~(255u << (8 * b))) | (e << (8 * b)));
    }
  }
  for (int rep = 0; rep < 100000; ++rep) expect_scales(rng());
}

// e5m2: bias 15, two mantissa bits, subnormals below 2^-14 (the codes here are finite).
double e5m2_value(uint8_t c) {
  const int e = (c >> 2) & 31, m = c & 3;
  const double mag = e == 0 ? std::ldexp(m, -16) : std::ldexp(1.0 + m / 4.0, e - 15);
  return (c & 0x80) ? -mag : mag;
}

void expect_e5m2(uint32_t v, int shift) {
  const HalfWords w = e2m1x8_by_table(v, e5m2_table(shift));
  for (int i = 0; i < 8; ++i) {
    const uint8_t code = (v >> (4 * i)) & 15u, got = byte_of(i < 4 ? w.lo : w.hi, i % 4);
    if (shift < -13) {
      ASSERT_EQ(got, 0) << "shift " << shift << ": a block out of reach widens to zeros";
      continue;
    }
    const double want = std::ldexp(static_cast<double>(e2m1_to_float(code)), shift);
    ASSERT_EQ(e5m2_value(got), want) << "word " << std::hex << v << " nibble " << std::dec << i << " shift " << shift;
    ASSERT_EQ(got & 0x80, (code & 8) << 4) << "the sign, zero's included";
  }
}

// check(v) for words with every code in every nibble (the other nibbles random: no bit may leak between
// them), then for random words.
template <typename Check>
void each_code_word(std::mt19937& rng, Check check) {
  for (int i = 0; i < 8; ++i) {
    for (uint32_t code = 0; code < 16; ++code) {
      for (int rep = 0; rep < 8; ++rep) check((rng() & ~(15u << (4 * i))) | (code << (4 * i)));
    }
  }
  for (int rep = 0; rep < 2000; ++rep) check(rng());
}

// FP4 per 128 (the wgmma kernel's widening): every code in every nibble at every shift of the reach is
// e5m2 of its value times 2^shift (the table words carry the shift), and a block past it is zeros.
TEST(Fp4Shift, TableWordsWidenEveryCodeTimesTwoToTheShiftToE5m2) {
  std::mt19937 rng(15);
  for (int shift = -20; shift <= 13; ++shift) each_code_word(rng, [&](uint32_t v) { expect_e5m2(v, shift); });
}

void expect_e4m3(uint32_t v, int shift) {
  const HalfWords w = e2m1x8_by_table(v, e4m3_table(shift));
  for (int i = 0; i < 8; ++i) {
    const uint8_t code = (v >> (4 * i)) & 15u, got = byte_of(i < 4 ? w.lo : w.hi, i % 4);
    const float want = std::ldexp(e2m1_to_float(code), shift);
    ASSERT_EQ(std::bit_cast<uint32_t>(e4m3_to_float(got)), std::bit_cast<uint32_t>(want))
        << "word " << std::hex << v << " nibble " << std::dec << i << " shift " << shift;
  }
}

// The cuBLASLt route's re-encoding (lt_experts.cu): every code in every nibble at every shift an exact
// block can have (-8 to 6: subnormal entries below -5) is the e4m3 code of its value times 2^shift, the
// sign (negative zero's included) as the float conversion it replaced gives it.
TEST(Fp4Shift, TableWordsReencodeEveryCodeTimesTwoToTheShiftToE4m3) {
  std::mt19937 rng(17);
  for (int shift = -8; shift <= 6; ++shift) each_code_word(rng, [&](uint32_t v) { expect_e4m3(v, shift); });
}

// A row block's scale as the wgmma kernel stores it: 2^(top - 140) (NaN for byte 255), its bytes' extremes.
TEST(Fp4Shift, RowBlockScaleAndScaleBytesExtremes) {
  for (uint32_t top = 0; top < 256; ++top) {
    const uint32_t want =
        top == 255 ? 0x7fc00000u : std::bit_cast<uint32_t>(std::ldexp(1.0f, static_cast<int>(top) - 140));
    EXPECT_EQ(fp4_block_scale_bits(top), want) << "top " << top;
  }
  std::mt19937 rng(16);
  for (int rep = 0; rep < 100000; ++rep) {
    const uint32_t w = rng();
    uint32_t hi = 0, lo = 255;
    for (int b = 0; b < 4; ++b) hi = std::max<uint32_t>(hi, byte_of(w, b)), lo = std::min<uint32_t>(lo, byte_of(w, b));
    ASSERT_EQ(max_byte(w), hi);
    ASSERT_EQ(min_byte(w), lo);
  }
}

}  // namespace
}  // namespace dsv4::cuda
