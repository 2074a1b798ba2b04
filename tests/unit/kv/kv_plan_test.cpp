// kv-plan numbers for the real V4-Flash config, the layout's bucket and waste bounds, and bad input.
#include "kv/kv_plan.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "unit/kv/kv_test_support.h"

namespace dsv4 {
namespace {

constexpr int64_t kMillion = int64_t{1} << 20;

struct Expected {
  KvDTypes dtypes;
  double bytes_per_token;
  int64_t fixed;
  int64_t per_sequence;
};

class FlashPlan : public ::testing::TestWithParam<Expected> {};

TEST_P(FlashPlan, MatchesTheIssueNumbers) {
  const Expected e = GetParam();
  const KvPlan p = make_kv_plan(v4_flash_config(), e.dtypes, kMillion);
  EXPECT_DOUBLE_EQ(p.bytes_per_token, e.bytes_per_token);
  EXPECT_EQ(p.fixed_bytes, e.fixed);
  EXPECT_EQ(p.per_sequence_bytes, e.per_sequence);
  EXPECT_GE(p.allocated_bytes, p.per_sequence_bytes);
  EXPECT_LE(static_cast<double>(p.allocated_bytes), 1.03 * static_cast<double>(p.per_sequence_bytes));
  EXPECT_EQ(p.max_sequences, kDefaultKvMemory / p.allocated_bytes);
  EXPECT_EQ(p.v32_estimate_bytes, 788 * 43 * kMillion);
  EXPECT_LE(p.buckets.size(), 3u);
  for (const auto& u : p.units) EXPECT_LE(u.waste, 0.03) << u.name;
  int64_t per_group_fixed = 0;
  for (const auto& g : p.groups) per_group_fixed += g.fixed_bytes;
  EXPECT_EQ(per_group_fixed, e.fixed);
}

INSTANTIATE_TEST_SUITE_P(
    Dtypes, FlashPlan,
    ::testing::Values(Expected{{KvCacheDType::kFp8, IndexerDType::kFp4}, 3514.25, 15'420'416, 3'700'378'624},
                      Expected{{KvCacheDType::kFp8, IndexerDType::kFp8}, 3850.25, 15'420'416, 4'052'700'160},
                      Expected{{KvCacheDType::kBf16, IndexerDType::kBf16}, 6880, 17'842'176, 7'232'045'056}));

// The windows are those of the 43 main layers: the MTP block's own window (128 x 584 B) is not included.
TEST(KvPlan, FixedBytesFromFirstPrinciples) {
  const KvPlan p = make_kv_plan(v4_flash_config(), {}, kMillion);
  const int64_t windows = 128 * 584 * 43;
  // Ratio 4: 8 rows of kv and score over 2*d_c channels, for the attention (d_c 512) and indexer (128) compressors.
  const int64_t c4_states = 21 * 8 * 2 * (2 * 512 + 2 * 128) * 4;
  const int64_t c128_states = 20 * 128 * 2 * 512 * 4;  // ratio 128: 128 rows of kv and score over 512 channels
  EXPECT_EQ(c4_states, 21 * (65536 + 16384));
  EXPECT_EQ(p.fixed_bytes, windows + c4_states + c128_states);
  EXPECT_EQ(windows, 3'214'336);
}

TEST(KvPlan, ProLikeScheduleMatchesServingTable) {
  const KvPlan p = make_kv_plan(kvtest::pro_like_config(), {}, kMillion);
  EXPECT_DOUBLE_EQ(p.bytes_per_token, 30 * 163 + 31 * 4.5625);  // 5031.4375, SERVING.md §10
  EXPECT_LE(static_cast<double>(p.allocated_bytes), 1.03 * static_cast<double>(p.per_sequence_bytes));
  // Layer pages depend on head and indexer dims only: the same buckets as V4-Flash.
  const KvPlan flash = make_kv_plan(v4_flash_config(), {}, kMillion);
  ASSERT_EQ(p.buckets.size(), flash.buckets.size());
  for (size_t b = 0; b < p.buckets.size(); ++b) EXPECT_EQ(p.buckets[b].page_bytes, flash.buckets[b].page_bytes);
}

TEST(KvPlan, ShortContextsRoundToWholePages) {
  const KvPlan p = make_kv_plan(v4_flash_config(), {}, 1000);
  // 1000 tokens: 4 blocks of every full unit, and windows still filling (swa holds all 1000 > 128 rows).
  EXPECT_EQ(p.per_sequence_bytes, 3'514'250 + 15'420'416);
  EXPECT_EQ(p.units[2].pages_per_sequence, 4);
  EXPECT_GE(p.allocated_bytes, p.per_sequence_bytes);
  const KvPlan one = make_kv_plan(v4_flash_config(), {}, 1);
  EXPECT_EQ(one.units[0].pages_per_sequence, 1);  // a single row
}

TEST(KvPlan, RefusesBadNumbers) {
  try {
    make_kv_plan(v4_flash_config(), {}, 0);
    FAIL() << "context 0 accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "kv-plan: --context must lie in [1, 4294967296], got 0");
  }
  try {
    make_kv_plan(v4_flash_config(), {}, 100, -5);
    FAIL() << "negative memory accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "kv-plan: --kv-memory must be positive, got -5");
  }
}

}  // namespace
}  // namespace dsv4
