// Splitting a memory budget into pools: V4-Flash at 100 GiB, the refusal of too little memory, and the
// manager's startup check that one max-length request fits.
#include "kv/kv_pool_sizing.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_plan.h"
#include "unit/kv/kv_test_support.h"

namespace dsv4 {
namespace {

TEST(KvPoolSizing, FlashHundredGiB) {
  const KvLayout l = make_kv_layout(v4_flash_config(), {});
  const KvPoolSplit s = size_kv_pools(l, kDefaultKvMemory, {.max_num_seqs = 256, .max_num_batched_tokens = 8192});
  EXPECT_LE(s.bytes, kDefaultKvMemory);
  EXPECT_GE(s.bytes, kDefaultKvMemory - 899'648);  // less than one block of every full unit left over
  int64_t sliding = 0;
  for (const KvUnit& u : l.units) {
    if (!u.sliding()) continue;
    // Live and retained windows of 256 requests, plus one 8192-token chunk.
    const int64_t want = (2 * 256 * u.peak_pages + 8192 / u.positions_per_page) * u.num_layers();
    const int64_t share = s.pages[static_cast<size_t>(u.bucket)];
    EXPECT_GE(share, want) << u.name;
    sliding += want * l.buckets[static_cast<size_t>(u.bucket)].page_bytes;
  }
  // Everything else holds compressed entries at 3514.25 B per token (899,648 B per block of 256).
  EXPECT_EQ(s.full_tokens % 256, 0);
  EXPECT_NEAR(static_cast<double>(s.full_tokens) * 3514.25 + static_cast<double>(sliding), static_cast<double>(s.bytes),
              1e-4 * static_cast<double>(s.bytes));
  // Enough for 8 sequences of 1M tokens; the manager accepts it with that max_model_len.
  EXPECT_GT(s.full_tokens, 8 << 20);
  KvCacheManager m(l, s.pages, {.max_model_len = 1 << 20});
  EXPECT_EQ(m.stats().pools.size(), 3u);
}

TEST(KvPoolSizing, RefusesABudgetWithoutRoomForCompressedEntries) {
  const KvLayout l = make_kv_layout(v4_flash_config(), {});
  try {
    size_kv_pools(l, int64_t{1} << 30, {.max_num_seqs = 256});
    FAIL() << "1 GiB for 256 sequences accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("KV pools: 1073741824 B of KV memory cannot hold the sliding windows of 256 "
                                         "sequences ("),
              std::string::npos)
        << e.what();
  }
  // Enough for the windows but not for one 1M-token request: the manager refuses at startup.
  const KvPoolSplit s = size_kv_pools(l, int64_t{6} << 30, {.max_num_seqs = 64});
  try {
    KvCacheManager m(l, s.pages, {.max_model_len = 1 << 20});
    FAIL() << "a pool without room for one 1M-token request accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("KV cache cannot hold one request of max_model_len = 1048576 tokens; pool"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace dsv4
