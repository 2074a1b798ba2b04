#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"
#include "op_test_util.h"

namespace dsv4 {
namespace {

using testing::bf;
using testing::OwnedTable;

// FP4-grid values with one scale: every dot product of two such vectors is exact in fp32, so the
// scores can be emulated bit for bit whatever the summation order.
std::vector<float> grid_values(size_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int> code(0, 15);
  std::vector<float> v(n);
  for (auto& x : v) x = e2m1_to_float(static_cast<uint8_t>(code(rng)));
  return v;
}

struct IndexerCase {
  int heads, d = 128, topk;
  int64_t tokens;
  int32_t stride;
  KvEntryFormat format;
  OwnedTable keys;
  std::vector<std::vector<float>> key_values;  // per slot
  std::vector<uint16_t> q, w;
  std::vector<int32_t> pos, seq, key_slots, key_count, slot_map;
  float weight_scale;

  IndexerCase(int h, int64_t t, int k, int32_t max_keys, int n_seq, KvEntryFormat f, std::mt19937& rng)
      : heads(h), topk(k), tokens(t), stride(max_keys), format(f), keys(int64_t{max_keys} * n_seq, f, {128, 0}, 6) {
    weight_scale = static_cast<float>(std::pow(128.0, -0.5) * std::pow(double(h), -0.5));
    for (int64_t s = 0; s < int64_t{max_keys} * n_seq; ++s) set_key(s, grid_values(128, rng));
    q = testing::to_bf16(grid_values(static_cast<size_t>(t * h * 128), rng));
    w = testing::random_bf16(static_cast<size_t>(t * h), rng);
    // Sequence s stores its key j at slot (n_seq − 1 − s)·stride + (stride − 1 − j): paging is exercised.
    for (int s = 0; s < n_seq; ++s) {
      for (int32_t j = 0; j < max_keys; ++j) {
        key_slots.push_back((n_seq - 1 - s) * max_keys + (max_keys - 1 - j));
        slot_map.push_back(1000 * s + j);
      }
    }
  }

  void set_key(int64_t slot, const std::vector<float>& v) {
    if (key_values.size() <= static_cast<size_t>(slot)) key_values.resize(static_cast<size_t>(slot) + 1);
    encode_kv_entry(format, {128, 0}, v, {keys.table.entry(slot), static_cast<size_t>(keys.table.entry_bytes)});
    key_values[static_cast<size_t>(slot)].assign(128, 0);
    decode_kv_entry(format, {128, 0}, {keys.table.entry(slot), static_cast<size_t>(keys.table.entry_bytes)},
                    key_values[static_cast<size_t>(slot)]);
  }

  IndexerTopkParams params(int32_t* out, int32_t* out_slots) const {
    return {.q = q.data(),
            .weights = w.data(),
            .weight_scale = weight_scale,
            .tokens = tokens,
            .heads = heads,
            .head_dim = d,
            .positions = pos.data(),
            .ratio = 4,
            .token_seq = seq.data(),
            .sequences = static_cast<int64_t>(key_count.size()),
            .keys = keys.table,
            .key_slots = key_slots.data(),
            .key_stride = stride,
            .key_count = key_count.data(),
            .topk = topk,
            .out_index = out,
            .slot_map = out_slots ? slot_map.data() : nullptr,
            .out_slots = out_slots};
  }

  std::vector<int32_t> run(Ops& ops, std::vector<int32_t>* slots_out = nullptr) const {
    std::vector<int32_t> out(static_cast<size_t>(tokens * topk), 77);
    if (slots_out) slots_out->assign(out.size(), 77);
    ops.indexer_topk(params(out.data(), slots_out ? slots_out->data() : nullptr));
    return out;
  }

  // §5.6 written out.
  float score(int64_t t, int32_t j) const {
    const auto& key =
        key_values[static_cast<size_t>(key_slots[static_cast<size_t>(seq[static_cast<size_t>(t)] * stride + j)])];
    float total = 0;
    for (int h = 0; h < heads; ++h) {
      float dotv = 0;
      for (int i = 0; i < d; ++i)
        dotv += bf(q[static_cast<size_t>((t * heads + h) * d + i)]) * key[static_cast<size_t>(i)];
      const float wh = round_bf16(bf(w[static_cast<size_t>(t * heads + h)]) * weight_scale);
      total += round_bf16(std::max(round_bf16(dotv), 0.0f) * wh);
    }
    return round_bf16(total);
  }

  std::vector<int32_t> emulate() const {
    std::vector<int32_t> out;
    for (int64_t t = 0; t < tokens; ++t) {
      const int32_t eligible =
          std::min(key_count[static_cast<size_t>(seq[static_cast<size_t>(t)])], (pos[static_cast<size_t>(t)] + 1) / 4);
      std::vector<int32_t> order(static_cast<size_t>(std::max(eligible, 0)));
      std::iota(order.begin(), order.end(), 0);
      std::vector<float> s;
      for (int32_t j : order) s.push_back(score(t, j));
      std::stable_sort(order.begin(), order.end(),
                       [&](int32_t a, int32_t b) { return s[static_cast<size_t>(a)] > s[static_cast<size_t>(b)]; });
      for (int r = 0; r < topk; ++r) out.push_back(r < eligible ? order[static_cast<size_t>(r)] : -1);
    }
    return out;
  }
};

TEST(IndexerTopk, MatchesTheSpecScoresEligibilityAndOrder) {
  for (KvEntryFormat f : {KvEntryFormat::kIndexFp4, KvEntryFormat::kBf16, KvEntryFormat::kIndexFp8}) {
    std::mt19937 rng(71);
    CpuOps ops(2);
    IndexerCase s(4, 7, 8, 40, 2, f, rng);
    s.pos = {0, 3, 7, 20, 159, 100, 39};
    s.seq = {0, 0, 0, 0, 0, 1, 1};
    s.key_count = {40, 26};  // sequence 1 has fewer keys than its positions allow
    std::vector<int32_t> slots;
    const auto got = s.run(ops, &slots);
    const auto want = s.emulate();
    EXPECT_EQ(got, want) << kv_entry_format_name(f);
    for (size_t i = 0; i < got.size(); ++i) {
      const int32_t seq = s.seq[i / 8];
      EXPECT_EQ(slots[i], got[i] < 0 ? -1 : 1000 * seq + got[i]);
    }
    // t = 0..2: no key yet or too few; t = 3 sees exactly keys 0..4 (then −1).
    EXPECT_EQ(std::count(got.begin(), got.begin() + 8, -1), 8);
    EXPECT_EQ(std::count(got.begin() + 8, got.begin() + 16, -1), 7);
    EXPECT_EQ(std::count(got.begin() + 16, got.begin() + 24, -1), 6);
  }
}

TEST(IndexerTopk, TiesGoToTheLowerIndex) {
  std::mt19937 rng(72);
  CpuOps ops(2);
  IndexerCase s(4, 3, 3, 16, 1, KvEntryFormat::kIndexFp4, rng);
  s.pos = {63, 63, 63};
  s.seq = {0, 0, 0};
  s.key_count = {16};
  // Query 0: keys 9, 4, 12 are one strong vector (equal scores), all others zero: picks 4, 9, 12.
  const std::vector<float> zero(128, 0.0f), strong(128, 2.0f);
  for (int32_t j = 0; j < 16; ++j) s.set_key(s.key_slots[static_cast<size_t>(j)], zero);
  for (int32_t j : {12, 9, 4}) s.set_key(s.key_slots[static_cast<size_t>(j)], strong);
  std::fill(s.q.begin(), s.q.end(), float_to_bf16(1.0f));
  std::fill(s.w.begin(), s.w.end(), float_to_bf16(1.0f));
  // Query 1: negative weights make every score ≤ 0; the strong keys score below the zero ones.
  std::fill(s.w.begin() + 4, s.w.begin() + 8, float_to_bf16(-1.0f));
  // Query 2: q opposite to every key: ReLU zeros everywhere, the first three indices win.
  std::fill(s.q.begin() + 2 * 4 * 128, s.q.end(), float_to_bf16(-1.0f));
  const auto got = s.run(ops);
  EXPECT_EQ(got, (std::vector<int32_t>{4, 9, 12, 0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(got, s.emulate());
}

TEST(IndexerTopk, BatchAndThreadInvariantAtV4FlashDims) {
  std::mt19937 rng(73);
  CpuOps one(1), three(3);
  IndexerCase s(64, 3, 512, 120, 1, KvEntryFormat::kIndexFp4, rng);
  s.pos = {479, 400, 100};
  s.seq = {0, 0, 0};
  s.key_count = {120};
  const auto all = s.run(three);
  EXPECT_EQ(s.run(one), all);
  EXPECT_EQ(all, s.emulate());
  EXPECT_EQ(all[119], s.emulate()[119]);
  EXPECT_EQ(all[120], -1);  // 120 eligible keys, then padding
  IndexerCase alone = s;
  alone.tokens = 1;
  alone.q.assign(s.q.begin() + 64 * 128, s.q.begin() + 2 * 64 * 128);
  alone.w.assign(s.w.begin() + 64, s.w.begin() + 128);
  alone.pos = {400};
  alone.seq = {0};
  const auto one_row = alone.run(one);
  EXPECT_TRUE(std::equal(one_row.begin(), one_row.end(), all.begin() + 512));
}

TEST(IndexerTopk, RejectsBadParameters) {
  std::mt19937 rng(74);
  CpuOps ops(1);
  IndexerCase s(4, 1, 4, 8, 1, KvEntryFormat::kIndexFp4, rng);
  s.pos = {31};
  s.seq = {0};
  s.key_count = {8};
  std::vector<int32_t> out(4), slots(4);
  auto p = s.params(out.data(), nullptr);
  p.out_slots = slots.data();  // without slot_map
  EXPECT_THROW(ops.indexer_topk(p), Error);
  p = s.params(out.data(), nullptr);
  p.topk = 0;
  EXPECT_THROW(ops.indexer_topk(p), Error);
  s.key_count = {9};  // more keys than the stride holds
  EXPECT_THROW(ops.indexer_topk(s.params(out.data(), nullptr)), Error);
  s.seq = {1};  // only one sequence
  EXPECT_THROW(ops.indexer_topk(s.params(out.data(), nullptr)), Error);
  s.seq = {0};
  s.key_count = {8};
  s.key_slots[3] = 999;  // beyond the table
  EXPECT_THROW(ops.indexer_topk(s.params(out.data(), nullptr)), Error);
}

}  // namespace
}  // namespace dsv4
