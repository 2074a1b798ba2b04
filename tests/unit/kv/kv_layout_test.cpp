// Group specs, entry sizes, page geometry and bucket choice for real and random configs.
#include "kv/kv_layout.h"

#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "unit/kv/kv_test_support.h"

namespace dsv4 {
namespace {

TEST(KvDTypes, ParsesNamesAndImpliesBf16Indexer) {
  EXPECT_EQ(parse_kv_dtypes("", "").cache, KvCacheDType::kFp8);
  EXPECT_EQ(parse_kv_dtypes("auto", "auto").indexer, IndexerDType::kFp4);
  EXPECT_EQ(parse_kv_dtypes("bf16", "").indexer, IndexerDType::kBf16);
  EXPECT_EQ(parse_kv_dtypes("bf16", "fp4").indexer, IndexerDType::kFp4);
  EXPECT_EQ(parse_kv_dtypes("fp8", "fp8").indexer, IndexerDType::kFp8);
  try {
    parse_kv_dtypes("fp16", "");
    FAIL() << "fp16 accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "--kv-cache-dtype must be one of auto, fp8, bf16; got 'fp16'");
  }
  try {
    parse_kv_dtypes("fp8", "int4");
    FAIL() << "int4 accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "--indexer-dtype must be one of auto, fp4, fp8, bf16; got 'int4'");
  }
}

TEST(KvDTypes, EntrySizesFollowTheConfig) {
  const ModelConfig f = v4_flash_config();
  EXPECT_EQ(attention_entry_size(f, KvCacheDType::kFp8), 584);  // 448 + 128 + 7, padded to 8
  EXPECT_EQ(attention_entry_size(f, KvCacheDType::kBf16), 1024);
  EXPECT_EQ(indexer_entry_size(f, IndexerDType::kFp4), 68);
  EXPECT_EQ(indexer_entry_size(f, IndexerDType::kFp8), 132);
  EXPECT_EQ(indexer_entry_size(f, IndexerDType::kBf16), 256);
  EXPECT_EQ(c4_state_row_size(f), 8192);
  EXPECT_EQ(c4_index_state_row_size(f), 2048);
  EXPECT_EQ(c128_state_row_size(f), 4096);
  const ModelConfig t = kvtest::tiny_config();
  EXPECT_EQ(attention_entry_size(t, KvCacheDType::kFp8), 200);  // 64 + 128 + 1 = 193 -> 200
  EXPECT_EQ(indexer_entry_size(t, IndexerDType::kFp4), 34);
}

TEST(KvGroups, FlashGroupsInDesignOrder) {
  const auto g = kv_group_specs(v4_flash_config(), {});
  const std::vector<std::string> names = {"swa",      "c4.state",   "c4.index.state", "c4.kv",
                                          "c4.index", "c128.state", "c128.kv"};
  const std::vector<int> layers = {43, 21, 21, 21, 21, 20, 20};
  const std::vector<int64_t> bytes = {584, 8192, 2048, 584, 68, 4096, 584};
  ASSERT_EQ(g.size(), names.size());
  for (size_t i = 0; i < g.size(); ++i) {
    EXPECT_EQ(g[i].name, names[i]);
    EXPECT_EQ(g[i].num_layers(), layers[i]) << names[i];
    EXPECT_EQ(g[i].entry_bytes, bytes[i]) << names[i];
  }
  EXPECT_EQ(g[0].window_rows(), 128);
  EXPECT_EQ(g[1].window_rows(), 8);
  EXPECT_EQ(g[5].window_rows(), 128);
  // While token 1027 is computed: swa reads back to 900, the overlap state the previous block of 4.
  EXPECT_EQ(g[0].first_needed(1027), 900);
  EXPECT_EQ(g[1].first_needed(1027), 1020);
  EXPECT_EQ(g[5].first_needed(1027), 1024);
  EXPECT_EQ(g[3].first_needed(1027), 0);
}

TEST(KvGroups, ConfigWithoutCompressionHasOnlyTheWindow) {
  ModelConfig c = kvtest::tiny_config();
  c.compress_ratios = {0, 0, 0, 0, 0, 0, 0};
  const auto g = kv_group_specs(c, {});
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].name, "swa");
  const KvLayout l = make_kv_layout(c, {});
  EXPECT_EQ(l.buckets.size(), 1u);
  // 200-byte entries: one row would pad to 208 (4%), two rows fill 400 exactly and round the window by 2.
  EXPECT_EQ(l.units[0].positions_per_page, 2);
  EXPECT_LE(l.max_waste(), 0.03);
}

TEST(KvGroups, RejectsUnknownRatio) {
  ModelConfig c = kvtest::tiny_config();
  c.compress_ratios[2] = 16;
  try {
    kv_group_specs(c, {});
    FAIL() << "ratio 16 accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "KV groups: compress_ratios[2] = 16 (allowed: 0, 4, 128)");
  }
}

// Geometry invariants that slot mapping and prefix retention rely on.
void check_geometry(const KvUnit& u, std::mt19937_64& rng) {
  std::uniform_int_distribution<int64_t> pos(0, 1 << 22);
  for (int i = 0; i < 2000; ++i) {
    const int64_t p = pos(rng);
    const int64_t q = u.page_of(p);
    ASSERT_LE(u.page_begin(q), p) << u.name;
    ASSERT_LT(p, u.page_end(q)) << u.name;
    ASSERT_EQ(u.page_begin(q) / kKvBlockTokens, (u.page_end(q) - 1) / kKvBlockTokens) << u.name << " straddles";
    ASSERT_EQ(u.page_of(u.page_end(q)), q + 1) << u.name << " pages not contiguous";
    const int64_t e = u.entry_in_page(p);
    if (u.sliding()) {
      ASSERT_EQ(e, p - u.page_begin(q));
    } else {
      ASSERT_EQ(e >= 0, (p + 1) % u.ratio == 0);
      if (e >= 0) {
        ASSERT_EQ(e, p / u.ratio % u.entries_per_page);
      }
    }
    ASSERT_LT(e, u.entries_per_page);
  }
  if (!u.sliding()) return;
  // Simulated decoding: pages live after releasing those wholly below first_needed(p).
  int64_t first = 0, most = 0;
  for (int64_t p = 0; p < 3000; ++p) {
    while (u.page_end(first) <= u.first_needed(p)) ++first;
    most = std::max(most, u.page_of(p) - first + 1);
  }
  EXPECT_EQ(most, u.peak_pages) << u.name;
}

TEST(KvLayout, FlashAndProStayWithinThreeBucketsAndThreePercent) {
  std::mt19937_64 rng(7);
  const KvDTypes combos[] = {{KvCacheDType::kFp8, IndexerDType::kFp4},
                             {KvCacheDType::kFp8, IndexerDType::kFp8},
                             {KvCacheDType::kBf16, IndexerDType::kBf16},
                             {KvCacheDType::kBf16, IndexerDType::kFp4}};
  for (const ModelConfig& c : {v4_flash_config(), kvtest::pro_like_config()}) {
    for (const KvDTypes d : combos) {
      const KvLayout l = make_kv_layout(c, d);
      EXPECT_LE(l.buckets.size(), 3u);
      EXPECT_LE(l.max_waste(), 0.03);
      for (size_t u = 0; u < l.units.size(); ++u) {
        const KvUnit& unit = l.units[u];
        EXPECT_LE(unit.content_bytes(), l.bucket_of(static_cast<int>(u)).page_bytes);
        if (unit.sliding()) {
          EXPECT_LT(unit.positions_per_page, kKvBlockTokens);  // never full 256-position pages
        }
        check_geometry(unit, rng);
      }
    }
  }
}

TEST(KvLayout, FlashFp8Fp4Geometry) {
  const KvLayout l = make_kv_layout(v4_flash_config(), {});
  ASSERT_EQ(l.units.size(), 5u);
  auto unit = [&](const std::string& group) -> const KvUnit& {
    return l.units[static_cast<size_t>(l.unit_of_group[static_cast<size_t>(l.find_group(group))])];
  };
  EXPECT_EQ(unit("c4.kv").name, "c4.kv+c4.index");
  EXPECT_EQ(unit("c4.kv").entries_per_page, 64);
  EXPECT_EQ(unit("c4.index").member_offsets, (std::vector<int64_t>{0, 64 * 584}));
  EXPECT_EQ(unit("c128.kv").entries_per_page, 2);
  EXPECT_EQ(unit("c4.state").name, "c4.state+c4.index.state");
  EXPECT_EQ(l.bucket_of(l.unit_of_group[0]).page_bytes, 1168);  // swa pages of 2 rows share c128.kv's bucket
  EXPECT_EQ(l.bucket_of(l.unit_of_group[static_cast<size_t>(l.find_group("c4.kv"))]).page_bytes, 41728);
  EXPECT_EQ(unit("c128.state").positions_per_page, 5);  // 26 pages of 5 rows per 128-token block
  EXPECT_EQ(unit("c128.state").peak_pages, 26);
  EXPECT_EQ(unit("swa").peak_pages, 65);
}

TEST(KvLayout, RandomConfigsKeepTheInvariants) {
  std::mt19937_64 rng(11);
  for (int i = 0; i < 40; ++i) {
    ModelConfig c = kvtest::tiny_config();
    const int heads[] = {128, 192, 256, 512};
    c.head_dim = heads[rng() % 4];
    c.rope_head_dim = 64;
    c.index_head_dim = 64 << (rng() % 2);
    c.window_size = 1 + static_cast<int>(rng() % 300);
    c.n_layers = 1 + static_cast<int>(rng() % 12);
    c.compress_ratios.clear();
    for (int j = 0; j < c.n_layers; ++j) c.compress_ratios.push_back(std::vector<int>{0, 4, 128}[rng() % 3]);
    c.compress_ratios.push_back(0);
    const KvDTypes d{rng() % 2 ? KvCacheDType::kFp8 : KvCacheDType::kBf16, IndexerDType(rng() % 3)};
    const KvLayout l = make_kv_layout(c, d);
    EXPECT_LE(l.buckets.size(), 3u);
    for (const KvBucket& b : l.buckets) EXPECT_EQ(b.page_bytes % kKvPageAlign, 0);
    for (size_t u = 0; u < l.units.size(); ++u) {
      EXPECT_LE(l.units[u].content_bytes(), l.bucket_of(static_cast<int>(u)).page_bytes);
      check_geometry(l.units[u], rng);
    }
  }
}

}  // namespace
}  // namespace dsv4
