// The host tier (kv/host_tier.h) against a reference LRU, and the cache manager with the tier on: evicted
// prefixes come back with the bytes a fresh computation writes, restores are all or nothing, a block
// recomputed while its copy is on the host is stored again, and nothing leaks.
#include "kv/host_tier.h"

#include <gtest/gtest.h>

#include <list>
#include <map>
#include <random>

#include "core/error.h"
#include "kv/kv_page_copy.h"
#include "testing/error_of.h"
#include "unit/kv/kv_page_copy_held.h"
#include "unit/kv/kv_test_support.h"

namespace dsv4 {
namespace {

using kvtest::Fixture;
using kvtest::PrefixSignature;

// The reference: per bucket a list of (key, pages), least recent first, and a count of free pages.
struct ReferenceLru {
  std::list<std::pair<uint64_t, int>> lru;
  int64_t free = 0;
  bool has(uint64_t key) const {
    return std::any_of(lru.begin(), lru.end(), [&](const auto& e) { return e.first == key; });
  }
  bool store(uint64_t key, int pages) {
    for (auto it = lru.begin(); it != lru.end(); ++it) {
      if (it->first != key) continue;
      lru.splice(lru.end(), lru, it);
      return true;
    }
    while (free < pages && !lru.empty()) {
      free += lru.front().second;
      lru.pop_front();
    }
    if (free < pages) return false;
    free -= pages;
    lru.emplace_back(key, pages);
    return true;
  }
  int take(uint64_t key) {
    const auto it = std::find_if(lru.begin(), lru.end(), [&](const auto& e) { return e.first == key; });
    const int pages = it->second;
    lru.erase(it);
    return pages;
  }
};

TEST(KvHostTier, LruMatchesAReferenceModel) {
  std::mt19937_64 rng(71);
  const std::vector<int64_t> capacity = {23, 40};
  KvHostTier tier({96, 64}, capacity, nullptr);
  std::vector<ReferenceLru> ref(2);
  for (size_t b = 0; b < 2; ++b) ref[b].free = capacity[b];
  std::vector<std::pair<int, KvHostEntry>> taken;  // restores in flight
  const auto key_of = [&](int b) { return (rng() % 30) * 2 + static_cast<uint64_t>(b) + 1000; };
  for (int op = 0; op < 20000; ++op) {
    const int b = static_cast<int>(rng() % 2);
    const uint64_t key = key_of(b);
    const int pages = 1 + static_cast<int>(key % 7) * (6 * b + 1);  // one size per key; some larger than the pool
    const int pick = static_cast<int>(rng() % 10);
    if (pick < 5) {
      const bool stored = !tier.store(b, key, 0, pages, false).empty();
      ASSERT_EQ(stored, ref[static_cast<size_t>(b)].store(key, pages)) << "op " << op;
    } else if (pick < 8) {
      ASSERT_EQ(tier.find(b, key) != nullptr, ref[static_cast<size_t>(b)].has(key)) << "op " << op;
      if (tier.find(b, key) != nullptr && pick == 7) {
        taken.emplace_back(b, tier.take(b, key));
        ref[static_cast<size_t>(b)].take(key);
      }
    } else if (!taken.empty()) {
      const size_t i = rng() % taken.size();
      tier.release(taken[i].first, taken[i].second.pages);
      ref[static_cast<size_t>(taken[i].first)].free += static_cast<int64_t>(taken[i].second.pages.size());
      taken.erase(taken.begin() + static_cast<std::ptrdiff_t>(i));
    }
    ASSERT_NO_THROW(tier.check());
    const auto s = tier.stats();
    for (size_t k = 0; k < 2; ++k) {
      ASSERT_EQ(s[k].entries, static_cast<int64_t>(ref[k].lru.size()));
      ASSERT_EQ(s[k].capacity_pages - s[k].used_pages, ref[k].free);
    }
  }
  EXPECT_GT(tier.stats()[0].evictions, 0u);
  EXPECT_GT(tier.stats()[1].dropped, 0u);
}

TEST(KvHostTier, BadInputIsRefusedWithClearErrors) {
  KvHostTier tier({64}, {8}, nullptr);
  EXPECT_NE(testing::error_of([&] { tier.take(0, 5); }).find("holds no block"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { tier.page_address(0, 0); }).find("no page 0 in memory"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { tier.find(1, 5); }).find("no pool 1"), std::string::npos);
  EXPECT_NE(testing::error_of([] { KvHostTier({64}, {-1}, nullptr); }).find("out of range"), std::string::npos);
}

// Room for one 3000-position request on the device, and `host_pools` times the pools' bytes on the host.
KvCacheOptions tiered(double host_pools) {
  const KvLayout l = make_kv_layout(kvtest::tiny_config(), {});
  int64_t bytes = 0;
  const auto pages = kvtest::pages_for(l, 3000, 1, 3000);
  for (size_t b = 0; b < pages.size(); ++b) bytes += pages[b] * l.buckets[b].page_bytes;
  return {.retention_interval = -1, .host_tier_bytes = static_cast<int64_t>(host_pools * static_cast<double>(bytes))};
}

// Prefills a random prompt `a` of 3000 tokens, then one `b` of 2000 (whose blocks push `a`'s out of the
// device pools), frees both; returns {a, b}.
std::pair<std::vector<int32_t>, std::vector<int32_t>> evict_with_another(Fixture& f, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto a = kvtest::random_tokens(rng, 3000), b = kvtest::random_tokens(rng, 2000);
  PrefixSignature sa(""), sb("");
  f.prefill(1, a, sa, "", 3000);
  f.m->free(1);
  f.prefill(2, b, sb, "", 3000);
  f.m->free(2);
  return {a, b};
}

// Request 3 starts with prompt `a`: its prefix hit, whose entries must hold what a fresh computation writes.
int64_t hit_again(Fixture& f, const std::vector<int32_t>& a) {
  PrefixSignature sig("");
  f.m->add_request(3, static_cast<int64_t>(a.size()));
  const PrefixHit hit = f.m->lookup_prefix(3, a);
  EXPECT_TRUE(f.m->allocate(3, 1, a, &hit));
  EXPECT_EQ(f.store->mismatches(3, a, sig, 0, hit.tokens), 0);
  return hit.tokens;
}

// Per group: the unit's blocks, each group its share of the pages; per unit the groups' shares are at
// most the pages' bytes, and over all units they account for at most the bytes copied.
void expect_group_counters_add_up(const KvLayout& l, const KvCacheStats& s) {
  int64_t restored = 0, offloaded = 0, blocks = 0;
  std::vector<int64_t> unit_bytes(l.units.size(), 0), unit_blocks(l.units.size(), -1);
  for (size_t g = 0; g < s.groups.size(); ++g) {
    const auto u = static_cast<size_t>(l.unit_of_group[g]);
    const KvGroupStats& gs = s.groups[g];
    EXPECT_TRUE(unit_blocks[u] < 0 || unit_blocks[u] == gs.host_restored_blocks) << gs.name;
    unit_blocks[u] = gs.host_restored_blocks;
    EXPECT_LE(gs.host_restored_blocks, gs.host_offloaded_blocks) << gs.name;
    unit_bytes[u] += gs.host_restore_bytes;
    restored += gs.host_restore_bytes;
    offloaded += gs.host_offload_bytes;
  }
  for (size_t u = 0; u < l.units.size(); ++u) {
    const int64_t page = l.buckets[static_cast<size_t>(l.units[u].bucket)].page_bytes;
    EXPECT_LE(unit_bytes[u], std::max<int64_t>(unit_blocks[u], 0) * l.units[u].num_layers() * page) << l.units[u].name;
    blocks += std::max<int64_t>(unit_blocks[u], 0);
  }
  EXPECT_GT(blocks, 0);
  EXPECT_GT(restored, 0);
  EXPECT_LE(restored, s.restore_bytes);
  EXPECT_LE(offloaded, s.offload_bytes);
}

// The tier's split follows what prefixes store per block: with a checkpoint at every block (retention
// -1) the buckets of sliding units get more of it than with one window a prompt (0), every bucket that
// stores anything gets pages, and the split never exceeds the bytes.
// Copies that continue each other in both tiers join (same direction only, order kept); the bytes
// moved stay those of the parts.
TEST(KvHostTier, ContiguousCopiesJoin) {
  std::vector<std::byte> dev(64), host(64);
  auto d = [&](int i) { return dev.data() + i; };
  auto h = [&](int i) { return host.data() + i; };
  std::vector<KvPageCopy> batch = {
      {h(0), d(0), 8, false},   {h(8), d(8), 8, false},   // joined: an offload of 16 bytes
      {d(16), h(16), 8, true},  {d(24), h(24), 8, true},  // joined: a restore of 16 bytes
      {d(40), h(32), 8, true},                            // the source continues, the destination does not
      {h(48), d(48), 8, false},                           // continues the last addresses, other direction
  };
  coalesce(batch);
  ASSERT_EQ(batch.size(), 4u);
  EXPECT_EQ(batch[0].bytes, 16);
  EXPECT_FALSE(batch[0].to_device);
  EXPECT_EQ(batch[1].dst, d(16));
  EXPECT_EQ(batch[1].bytes, 16);
  EXPECT_EQ(batch[2].dst, d(40));
  EXPECT_EQ(batch[3].dst, h(48));
  int64_t bytes = 0;
  for (const KvPageCopy& c : batch) bytes += c.bytes;
  EXPECT_EQ(bytes, 48);
}

TEST(KvHostTier, SplitFollowsWhatPrefixesStore) {
  const KvLayout l = make_kv_layout(kvtest::tiny_config(), {});
  const int64_t bytes = int64_t{64} << 20;
  const auto dense = host_tier_pages(l, bytes, -1), sparse = host_tier_pages(l, bytes, 0);
  const auto every_4 = host_tier_pages(l, bytes, 4 * kKvBlockTokens);
  ASSERT_EQ(dense.size(), l.buckets.size());
  int64_t used = 0;
  for (size_t b = 0; b < l.buckets.size(); ++b) {
    bool full = false, sliding = false;
    for (int u : l.buckets[b].units) {
      (l.units[static_cast<size_t>(u)].sliding() ? sliding : full) = true;
    }
    EXPECT_GT(dense[b], 0) << "bucket " << b;
    if (sliding && !full) {
      EXPECT_GT(dense[b], every_4[b]) << "bucket " << b;
      EXPECT_GT(every_4[b], sparse[b]) << "bucket " << b;
    }
    if (full && !sliding) {
      EXPECT_LT(dense[b], sparse[b]) << "bucket " << b;
    }
    used += dense[b] * l.buckets[b].page_bytes;
  }
  EXPECT_LE(used, bytes);
  EXPECT_GT(used, bytes * 9 / 10);
}

TEST(KvHostTierManager, EvictedPrefixComesBackWithTheBytesOfAFreshComputation) {
  for (const double host : {0.0, 2.0}) {
    Fixture f(tiered(host), 3000, 1, 3000);
    const auto [a, b] = evict_with_another(f, 6);
    const int64_t hit = hit_again(f, a);
    const KvCacheStats s = f.m->stats();
    if (host == 0) {
      EXPECT_LT(hit, 2816) << "the device alone must have lost part of the prefix";
      EXPECT_EQ(s.offload_bytes, 0);
      continue;
    }
    EXPECT_EQ(hit, 2816);  // every whole block of the prompt but the last position's
    EXPECT_EQ(s.host_hits, 1);
    EXPECT_GT(s.host_restored_tokens, 0);
    EXPECT_GT(s.offload_bytes, 0);
    EXPECT_GT(s.restore_bytes, 0);
    EXPECT_EQ(s.restore_seconds.count, 1u);  // one restore timed
    EXPECT_GT(s.restore_copy_seconds, 0.0);  // and its copies apart
    expect_group_counters_add_up(f.m->layout(), s);
    EXPECT_NO_THROW(f.m->check_consistency());
  }
}

TEST(KvHostTierManager, RestoreIsAllOrNothingWhenThePoolsAreFull) {
  std::mt19937_64 rng(10);
  Fixture f(tiered(2.0), 3000, 1, 3000);
  const auto a = evict_with_another(f, 8).first;
  PrefixSignature s4("");
  f.prefill(4, kvtest::random_tokens(rng, 2900), s4, "", 3000);  // holds nearly every page
  const KvCacheStats before = f.m->stats();
  f.m->add_request(3, 3000);
  const PrefixHit hit = f.m->lookup_prefix(3, a);
  const KvCacheStats after = f.m->stats();
  EXPECT_EQ(after.host_hits, 0);
  EXPECT_EQ(after.restore_bytes, before.restore_bytes);
  for (size_t b2 = 0; b2 < after.host_pools.size(); ++b2) {
    EXPECT_EQ(after.host_pools[b2].entries, before.host_pools[b2].entries);
  }
  EXPECT_LT(hit.tokens, 2816);
  EXPECT_NO_THROW(f.m->check_consistency());
}

TEST(KvHostTierManager, BlockRecomputedWhileOnTheHostIsStoredAgain) {
  Fixture f(tiered(2.0), 3000, 1, 3000);
  const auto [a, b] = evict_with_another(f, 9);
  // Request 5 recomputes `a` without a lookup: its blocks get the keys the host tier holds.
  PrefixSignature s5("");
  f.m->add_request(5, 3000);
  ASSERT_TRUE(f.m->allocate(5, 3000, a));
  f.store->write(5, a, s5, 0, 3000);
  f.m->free(5);
  const auto stored = [&] {
    uint64_t n = 0;
    for (const auto& p : f.m->stats().host_pools) n += p.stored;
    return n;
  };
  const uint64_t before = stored();
  PrefixSignature sb("");
  f.prefill(6, b, sb, "", 3000);  // evicts `a` again: the host refreshes its entries, no second copy
  f.m->free(6);
  EXPECT_GT(stored(), before);
  EXPECT_NO_THROW(f.m->check_consistency());
  EXPECT_EQ(hit_again(f, a), 2816);
}

// Restores in the background: the prefix is found at once but is not readable until its copies land.
// Meanwhile its blocks stay held (a second lookup finds them, pressure evicts none) and so do the host
// pages they are read from; once landed the hit is an ordinary one, with a fresh computation's bytes.
TEST(KvHostTierManager, BackgroundRestoreIsHeldUntilItLands) {
  Fixture f(tiered(2.0), 3000, 1, 3000);
  kvtest::HeldRestores held;
  f.m->set_copier(&held);
  const kvtest::LandAtExit land_at_exit{held};
  const auto [a, b] = evict_with_another(f, 11);
  f.m->add_request(3, static_cast<int64_t>(a.size()));
  const PrefixHit hit = f.m->lookup_prefix(3, a);
  EXPECT_EQ(hit.tokens, 2816);
  EXPECT_NE(hit.ticket, 0u);
  EXPECT_GT(held.held(), 0u);
  EXPECT_FALSE(f.m->restored(hit));
  EXPECT_EQ(f.m->restores_in_flight(), 1);
  EXPECT_EQ(f.m->stats().restore_seconds.count, 0u);  // timed when it lands
  EXPECT_NO_THROW(f.m->check_consistency());          // the manager's own references are counted

  // Pressure while in flight: a prompt that wants every page gets only what the held blocks leave.
  std::mt19937_64 rng(12);
  const auto c = kvtest::random_tokens(rng, 2900);
  f.m->add_request(4, 2900);
  EXPECT_FALSE(f.m->can_allocate(4, 2900));
  f.m->free(4);
  // A second request with the same prompt waits on the same copies.
  f.m->add_request(5, static_cast<int64_t>(a.size()));
  const PrefixHit again = f.m->lookup_prefix(5, a);
  EXPECT_EQ(again.tokens, 2816);
  EXPECT_EQ(again.ticket, hit.ticket);
  EXPECT_FALSE(f.m->restored(again));
  f.m->free(5);

  held.land();
  EXPECT_TRUE(f.m->restored(hit));
  f.m->poll_restores();  // as the scheduler does at each step
  EXPECT_EQ(f.m->restores_in_flight(), 0);
  EXPECT_EQ(f.m->stats().restore_seconds.count, 1u);
  const PrefixHit now = f.m->lookup_prefix(3, a);
  EXPECT_EQ(now.tokens, 2816);
  EXPECT_EQ(now.ticket, 0u);
  ASSERT_TRUE(f.m->allocate(3, 1, a, &now));
  PrefixSignature sig("");
  EXPECT_EQ(f.store->mismatches(3, a, sig, 0, now.tokens), 0);
  EXPECT_EQ(f.m->stats().host_hits, 1);
  f.m->free(3);
  EXPECT_NO_THROW(f.m->check_consistency());
}

TEST(KvHostTierManager, PoolMemoryWithoutACopierIsRefused) {
  HostKvMemory pools;
  const KvLayout l = make_kv_layout(kvtest::tiny_config(), {});
  KvCacheOptions o{.memory = &pools, .host_tier_bytes = 1 << 20};
  EXPECT_NE(testing::error_of([&] { KvCacheManager(l, kvtest::pages_for(l, 3000, 1), o); }).find("page copier"),
            std::string::npos);
  o.host_tier_bytes = -1;
  EXPECT_NE(testing::error_of([&] { KvCacheManager(l, kvtest::pages_for(l, 3000, 1), o); }).find("negative"),
            std::string::npos);
}

}  // namespace
}  // namespace dsv4
