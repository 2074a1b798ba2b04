// DeviceBlockTables: after every sync each request's row holds its block table of the unit, while
// requests grow past the rows' width, come and go (an id that comes back is a new table), and
// outnumber the rows; a sync copies only the blocks a request gained.
#include "model/device_block_tables.h"

#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "kv/kv_pool_sizing.h"
#include "model/paged_kv.h"
#include "model_tools/presets.h"

namespace dsv4 {
namespace {

int full_unit(const KvCacheManager& m) {
  for (size_t u = 0; u < m.layout().units.size(); ++u)
    if (!m.layout().units[u].sliding()) return static_cast<int>(u);
  return -1;
}

void expect_rows(const DeviceBlockTables& t, const KvCacheManager& m, int unit, std::span<const KvRequestId> ids) {
  for (const KvRequestId id : ids) {
    const KvBlockTable b = m.block_table(id, unit);
    ASSERT_LE(static_cast<int64_t>(b.blocks.size()), t.stride());
    const int32_t* row = t.data() + int64_t{t.row(id)} * t.stride();
    for (size_t i = 0; i < b.blocks.size(); ++i) ASSERT_EQ(row[i], static_cast<int32_t>(b.blocks[i])) << id << " " << i;
  }
}

TEST(DeviceBlockTables, RowsFollowTheTablesAsRequestsGrowComeAndGo) {
  const ModelConfig& c = find_preset("tiny").config;
  HostDevice dev;
  OwnedPagedCache cache(c, 12, 40000, 12 * 40000);
  KvCacheManager& m = cache.manager();
  const int unit = full_unit(m);
  ASSERT_GE(unit, 0);
  DeviceBlockTables t(dev, m, unit);
  std::mt19937 rng(3);
  std::vector<int32_t> ids(40001, 1);
  std::vector<int64_t> len(12, 0);
  std::vector<KvRequestId> live;
  for (int step = 0; step < 60; ++step) {
    for (int32_t s = 0; s < 12; ++s) {
      const bool alive = m.has_request(static_cast<KvRequestId>(s));
      if (alive && (len[static_cast<size_t>(s)] > 36000 || rng() % 10 == 0)) {
        m.free(static_cast<KvRequestId>(s));  // gone; some come back as new requests of the same id
        len[static_cast<size_t>(s)] = 0;
        continue;
      }
      if (!alive && rng() % 2 != 0) continue;
      if (!alive) cache.add(s, 1);
      const int64_t n = rng() % 3 == 0 ? static_cast<int64_t>(rng() % 3000) + 1 : 1;
      cache.allocate(s, n, std::span<const int32_t>(ids.data(), static_cast<size_t>(len[static_cast<size_t>(s)] + n)));
      len[static_cast<size_t>(s)] += n;
    }
    live.clear();
    for (KvRequestId s = 0; s < 12; ++s)
      if (m.has_request(s) && rng() % 4 != 0) live.push_back(s);  // not every request runs every step
    t.sync(live);
    expect_rows(t, m, unit, live);
    ASSERT_FALSE(testing::Test::HasFatalFailure()) << "step " << step;
  }
  EXPECT_GT(t.stride(), 64) << "the rows never grew";
}

TEST(DeviceBlockTables, ASyncCopiesOnlyTheNewBlocks) {
  const ModelConfig& c = find_preset("tiny").config;
  HostDevice dev;
  OwnedPagedCache cache(c, 2, 4096, 4096);
  std::vector<int32_t> ids(4096, 1);
  const int unit = full_unit(cache.manager());
  DeviceBlockTables t(dev, cache.manager(), unit);
  cache.add(0, 1000);
  cache.allocate(0, 1000, ids);
  const std::vector<KvRequestId> one = {0};
  t.sync(one);
  const int64_t first = t.copied_blocks();
  EXPECT_EQ(first, static_cast<int64_t>(cache.manager().block_table(0, unit).blocks.size()));
  cache.allocate(0, 24, ids);  // 1024 positions: still in the same blocks
  t.sync(one);
  EXPECT_EQ(t.copied_blocks(), first);
  cache.allocate(0, 1, ids);  // a new block
  t.sync(one);
  EXPECT_EQ(t.copied_blocks(), first + 1);
  EXPECT_THROW(t.row(1), Error);
}

}  // namespace
}  // namespace dsv4
