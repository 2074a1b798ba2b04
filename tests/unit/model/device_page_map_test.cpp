// DevicePageMap: however a pool's blocks are allocated, released, cached and evicted, a map synced
// incrementally holds exactly what a full copy of the pool's page lists holds, copying only the lists
// that changed; and any number of maps follow one pool, each at its own pace.
#include "model/device_page_map.h"

#include <gtest/gtest.h>

#include <random>

#include "core/error.h"

namespace dsv4 {
namespace {

// The simple model: the pool's page lists, copied whole.
std::vector<int32_t> full_copy(const BlockPool& pool) {
  const auto l = pool.page_lists();
  return {l.begin(), l.end()};
}

std::vector<int32_t> contents(const BlockPool& pool, const DevicePageMap& m) {
  const BlockPageMap first = m.layer_map(0, 0);  // unit 0 starts the array
  return {first.pages, first.pages + pool.page_lists().size()};
}

// Random allocations, releases (keyed blocks become cached, and are evicted under pressure) and retains.
class PoolChurn {
 public:
  PoolChurn(BlockPool& pool, uint32_t seed) : pool_(pool), rng_(seed) {}

  void step() {
    const int op = pick(0, 9);
    if (op < 5 || held_.empty()) {
      const int unit = pick(0, 2);
      if (pool_.free_pages() + pool_.cached_pages() < pool_.unit_layers(unit)) return release_one();
      const uint32_t b = pool_.allocate(unit);
      if (pick(0, 1)) pool_.set_key(b, next_key_++);
      held_.push_back(b);
    } else if (op < 9) {
      release_one();
    } else {
      const uint32_t b = held_[static_cast<size_t>(pick(0, static_cast<int>(held_.size()) - 1))];
      pool_.retain(b);
      held_.push_back(b);
    }
  }

 private:
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  void release_one() {
    if (held_.empty()) return;
    const size_t i = static_cast<size_t>(pick(0, static_cast<int>(held_.size()) - 1));
    pool_.release(held_[i]);
    held_.erase(held_.begin() + static_cast<std::ptrdiff_t>(i));
  }

  BlockPool& pool_;
  std::mt19937 rng_;
  std::vector<uint32_t> held_;
  uint64_t next_key_ = 1;
};

TEST(DevicePageMap, IncrementalSyncsEqualAFullCopy) {
  HostDevice dev;
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    BlockPool pool(4096, 60, {3, 5, 1});
    PoolChurn churn(pool, seed);
    DevicePageMap every_step(dev, pool), now_and_then(dev, pool);
    std::mt19937 rng(seed);
    for (int i = 0; i < 400; ++i) {
      churn.step();
      every_step.sync();
      if (rng() % 7 == 0) now_and_then.sync();
      ASSERT_EQ(contents(pool, every_step), full_copy(pool)) << "seed " << seed << " step " << i;
    }
    now_and_then.sync();
    ASSERT_EQ(contents(pool, now_and_then), full_copy(pool)) << "seed " << seed;
    pool.check();
  }
}

TEST(DevicePageMap, CopiesOnlyTheListsThatChanged) {
  HostDevice dev;
  BlockPool pool(4096, 64, {4, 2});
  DevicePageMap m(dev, pool);
  m.sync();
  const int64_t whole = static_cast<int64_t>(pool.page_lists().size());
  EXPECT_EQ(m.copied_entries(), whole);
  const uint32_t a = pool.allocate(0), b = pool.allocate(1);
  m.sync();
  EXPECT_EQ(m.copied_entries(), whole + 4 + 2);
  pool.release(a);
  const uint32_t again = pool.allocate(0);  // the spare block, its pages unchanged: nothing to copy
  EXPECT_EQ(again, a);
  m.sync();
  EXPECT_EQ(m.copied_entries(), whole + 6);
  EXPECT_EQ(contents(pool, m), full_copy(pool));
  pool.release(b);
}

TEST(DevicePageMap, AMapFarBehindCopiesEverything) {
  HostDevice dev;
  BlockPool pool(4096, 8, {2});  // 4 blocks: the log keeps 4 changes
  DevicePageMap m(dev, pool);
  m.sync();
  for (int i = 0; i < 6; ++i) {  // 6 page-list changes: free pages first, then evicted ones
    const uint32_t b = pool.allocate(0);
    pool.set_key(b, static_cast<uint64_t>(i + 1));
    pool.release(b);  // cached, not spare: the next allocation assigns pages again
  }
  EXPECT_TRUE(pool.page_list_changes(0).all);
  m.sync();
  EXPECT_EQ(contents(pool, m), full_copy(pool));
}

TEST(DevicePageMap, LayerMapsAddressTheirUnitsLists) {
  HostDevice dev;
  BlockPool pool(4096, 30, {3, 2});
  DevicePageMap m(dev, pool);
  const uint32_t b = pool.allocate(1);
  m.sync();
  for (int layer = 0; layer < 2; ++layer) {
    const BlockPageMap lm = m.layer_map(1, layer);
    EXPECT_EQ(lm.layers, 2);
    ASSERT_TRUE(static_cast<int64_t>(b) >= lm.first_block && static_cast<int64_t>(b) < lm.first_block + lm.blocks);
    EXPECT_EQ(
        static_cast<uint32_t>(lm.pages[(b - static_cast<uint32_t>(lm.first_block)) * 2 + static_cast<uint32_t>(layer)]),
        pool.layer_pages(b)[static_cast<size_t>(layer)]);
  }
  EXPECT_THROW(m.layer_map(1, 2), Error);
}

}  // namespace
}  // namespace dsv4
