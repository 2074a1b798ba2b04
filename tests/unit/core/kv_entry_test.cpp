// Byte codecs of KV-cache entries and the paged table addressing (core/kv_entry.h).
#include "core/kv_entry.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/number_formats.h"
#include "core/quant.h"

namespace dsv4 {
namespace {

std::vector<float> random_values(size_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = round_bf16(d(rng));
  return v;
}

std::vector<float> round_trip(KvEntryFormat f, KvEntryDims dims, const std::vector<float>& v) {
  std::vector<uint8_t> bytes(static_cast<size_t>(kv_entry_bytes(f, dims)), 0xCD);
  encode_kv_entry(f, dims, v, bytes);
  std::vector<float> back(v.size());
  decode_kv_entry(f, dims, bytes, back);
  return back;
}

TEST(KvEntry, ByteSizes) {
  EXPECT_EQ(kv_entry_bytes(KvEntryFormat::kAttnFp8, {512, 64}), 584);  // V4-Flash: 448 + 128 + 7 + 1
  EXPECT_EQ(kv_entry_bytes(KvEntryFormat::kAttnFp8, {128, 64}), 200);  // golden tiny: 64 + 128 + 1 -> 200
  EXPECT_EQ(kv_entry_bytes(KvEntryFormat::kBf16, {512, 0}), 1024);
  EXPECT_EQ(kv_entry_bytes(KvEntryFormat::kIndexFp4, {128, 0}), 68);
  EXPECT_EQ(kv_entry_bytes(KvEntryFormat::kIndexFp8, {128, 0}), 132);
  EXPECT_EQ(kv_entry_bytes(KvEntryFormat::kBf16, {128, 0}), 256);
  EXPECT_EQ(kv_entry_bytes(KvEntryFormat::kF32, {2048, 0}), 8192);
}

// Q8(nope, 64) + bf16 rope values round-trip bit for bit; the layout is [e4m3][bf16 rope][scales][pad].
TEST(KvEntry, AttnFp8RoundTripsReferenceGridValuesExactly) {
  std::mt19937 rng(1);
  for (int trial = 0; trial < 50; ++trial) {
    const float scale = std::ldexp(1.0f, trial % 20 - 10);
    auto v = random_values(512, rng, scale);
    fake_quant_e4m3(std::span<float>(v).first(448), 64);
    if (trial == 3) std::fill(v.begin(), v.begin() + 64, 0.0f);   // an all-zero block
    if (trial == 4) std::fill(v.begin(), v.begin() + 64, 1e-6f);  // below the 1e-4 amax floor
    if (trial == 4) fake_quant_e4m3(std::span<float>(v).first(64), 64);
    const KvEntryDims dims{512, 64};
    std::vector<uint8_t> bytes(584, 0xCD);
    encode_kv_entry(KvEntryFormat::kAttnFp8, dims, v, bytes);
    std::vector<float> back(512);
    decode_kv_entry(KvEntryFormat::kAttnFp8, dims, bytes, back);
    for (int i = 0; i < 512; ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(back[static_cast<size_t>(i)]),
                std::bit_cast<uint32_t>(v[static_cast<size_t>(i)]))
          << trial << " " << i;
    uint16_t rope0;
    std::memcpy(&rope0, &bytes[448], 2);
    EXPECT_EQ(rope0, float_to_bf16(v[448]));
    EXPECT_EQ(bytes[583], 0);  // padding
  }
}

// Off-grid values: decode(encode(x)) is exactly the reference's Q8 of the nope part.
TEST(KvEntry, AttnFp8EncodeQuantizesLikeQ8) {
  std::mt19937 rng(2);
  auto v = random_values(192, rng, 3.0f);
  const auto back = round_trip(KvEntryFormat::kAttnFp8, {192, 64}, v);
  fake_quant_e4m3(std::span<float>(v).first(128), 64);
  EXPECT_EQ(back, v);
}

// Q4 index keys at scales from 2^-8 to 2^7 come back exactly.
void expect_q4_keys_round_trip(KvEntryFormat f, std::mt19937& rng) {
  for (int trial = 0; trial < 50; ++trial) {
    auto v = random_values(128, rng, std::ldexp(1.0f, trial % 16 - 8));
    fake_quant_e2m1(v);
    EXPECT_EQ(round_trip(f, {128, 0}, v), v) << trial;
  }
}

TEST(KvEntry, IndexFp4RoundTripsQ4ValuesAndPacksLowNibbleFirst) {
  std::mt19937 rng(3);
  expect_q4_keys_round_trip(KvEntryFormat::kIndexFp4, rng);
  std::vector<float> v(32, 0.0f);
  v[0] = 1.0f;   // code 2
  v[1] = -6.0f;  // code 15
  std::vector<uint8_t> bytes(17);
  encode_kv_entry(KvEntryFormat::kIndexFp4, {32, 0}, v, bytes);
  EXPECT_EQ(bytes[0], 0xF2);
  EXPECT_EQ(bytes[16], 127);  // scale 2^0
}

TEST(KvEntry, IndexFp8RoundTripsQ4ValuesWithCloseBlockScales) {
  std::mt19937 rng(4);
  expect_q4_keys_round_trip(KvEntryFormat::kIndexFp8, rng);
  // Block scales spread over 2^10: still exact.
  auto v = random_values(128, rng, 1.0f);
  for (int b = 0; b < 4; ++b)
    for (int i = 0; i < 32; ++i) v[static_cast<size_t>(b * 32 + i)] *= std::ldexp(1.0f, -(b * 10) / 3);
  fake_quant_e2m1(v);
  EXPECT_EQ(round_trip(KvEntryFormat::kIndexFp8, {128, 0}, v), v);
}

TEST(KvEntry, Bf16AndF32AreExact) {
  std::mt19937 rng(5);
  const auto v = random_values(96, rng, 100.0f);
  EXPECT_EQ(round_trip(KvEntryFormat::kBf16, {96, 0}, v), v);
  std::vector<float> f(96);
  std::normal_distribution<float> d;
  for (auto& x : f) x = d(rng);
  f[3] = -std::numeric_limits<float>::infinity();  // compressor state scores may be −inf
  EXPECT_EQ(round_trip(KvEntryFormat::kF32, {96, 0}, f), f);
}

TEST(KvEntry, RejectsBadDimsAndSizes) {
  EXPECT_THROW(kv_entry_bytes(KvEntryFormat::kAttnFp8, {500, 64}), Error);  // nope 436
  EXPECT_THROW(kv_entry_bytes(KvEntryFormat::kAttnFp8, {64, 64}), Error);   // no nope
  EXPECT_THROW(kv_entry_bytes(KvEntryFormat::kIndexFp4, {100, 0}), Error);
  EXPECT_THROW(kv_entry_bytes(KvEntryFormat::kBf16, {0, 0}), Error);
  std::vector<float> v(128);
  std::vector<uint8_t> small(67), right(68);
  EXPECT_THROW(encode_kv_entry(KvEntryFormat::kIndexFp4, {128, 0}, v, small), Error);
  std::vector<float> short_v(100);
  EXPECT_THROW(decode_kv_entry(KvEntryFormat::kIndexFp4, {128, 0}, right, short_v), Error);
}

TEST(EntryTable, PagedAddressingAndChecks) {
  std::vector<uint8_t> arena(3 * 1000);
  EntryTable t{.base = arena.data(),
               .page_bytes = 1000,
               .entries_per_page = 4,
               .entry_bytes = 200,
               .format = KvEntryFormat::kAttnFp8,
               .capacity = 12};
  EXPECT_EQ(t.entry(0), arena.data());
  EXPECT_EQ(t.entry(5), arena.data() + 1000 + 200);
  EXPECT_EQ(t.entry(11), arena.data() + 2000 + 600);
  EXPECT_EQ(checked_entry(t, 11, "t"), t.entry(11));
  EXPECT_THROW(checked_entry(t, 12, "t"), Error);
  EXPECT_THROW(checked_entry(t, -1, "t"), Error);
  check_entry_table(t, {128, 64}, "t");
  EXPECT_THROW(check_entry_table(t, {512, 64}, "t"), Error);  // 584-byte entries
  t.page_bytes = 700;
  EXPECT_THROW(check_entry_table(t, {128, 64}, "t"), Error);  // 4 entries do not fit
  const EntryTable c = contiguous_table(arena.data(), 15, KvEntryFormat::kAttnFp8, {128, 64});
  EXPECT_EQ(c.capacity, 15);
  EXPECT_EQ(c.entry(14), arena.data() + 14 * 200);
}

}  // namespace
}  // namespace dsv4
