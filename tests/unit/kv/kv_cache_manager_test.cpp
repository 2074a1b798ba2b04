// KvCacheManager: slots and byte layout, sliding release, prefix hits (exact bytes), retention intervals,
// free-queue order, vLLM's SWA retention regression, accounting and bad input.
#include "kv/kv_cache_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "core/error.h"
#include "testing/error_of.h"
#include "unit/kv/kv_test_support.h"

namespace dsv4 {
namespace {

using kvtest::BackingStore;
using kvtest::PrefixSignature;

using kvtest::Fixture;
using kvtest::pages_for;

TEST(KvCacheManager, SlotsAreDistinctAndEntriesDisjoint) {
  Fixture f;
  std::mt19937_64 rng(1);
  auto a = kvtest::random_tokens(rng, 1000), b = kvtest::random_tokens(rng, 700);
  PrefixSignature sa(""), sb("");
  f.prefill(1, a, sa);
  f.prefill(2, b, sb);
  f.decode(1, a, sa, 40, rng);
  std::map<std::pair<int, int64_t>, int> slots;  // (unit, slot) -> uses among live positions
  std::vector<std::pair<std::byte*, std::byte*>> ranges;
  const KvLayout& l = f.layout;
  for (KvRequestId id : {1, 2}) {
    const int64_t n = f.m->num_tokens(id);
    for (int u = 0; u < static_cast<int>(l.units.size()); ++u) {
      const KvUnit& unit = l.units[static_cast<size_t>(u)];
      for (int64_t p = unit.sliding() ? unit.first_needed(n) : 0; p < n; ++p) {
        const int64_t s = f.m->slot(id, u, p);
        ASSERT_EQ(s < 0, !unit.sliding() && (p + 1) % unit.ratio != 0);
        if (s < 0) continue;
        ASSERT_EQ(++slots[std::make_pair(u, s)], 1) << "slot reused within unit " << unit.name;
        for (int g : unit.groups) {
          for (int layer = 0; layer < unit.num_layers(); ++layer) {
            std::byte* e = f.m->entry_address(g, layer, s);
            ranges.emplace_back(e, e + l.groups[static_cast<size_t>(g)].entry_bytes);
          }
        }
      }
    }
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) ASSERT_LE(ranges[i - 1].second, ranges[i].first) << "entries overlap";
  EXPECT_EQ(f.store->live_mismatches(1, a, sa), 0);
  EXPECT_EQ(f.store->live_mismatches(2, b, sb), 0);
  f.m->check_consistency();
}

TEST(KvCacheManager, SlidingPagesLeaveAtOnce) {
  Fixture f;
  std::mt19937_64 rng(2);
  auto a = kvtest::random_tokens(rng, 600);
  PrefixSignature sa("");
  f.prefill(1, a, sa);
  f.decode(1, a, sa, 700, rng);
  const int64_t n = f.m->num_tokens(1);
  for (int u = 0; u < static_cast<int>(f.layout.units.size()); ++u) {
    const KvUnit& unit = f.layout.units[static_cast<size_t>(u)];
    const KvBlockTable t = f.m->block_table(1, u);
    if (!unit.sliding()) {
      EXPECT_EQ(static_cast<int64_t>(t.blocks.size()), (n + 255) / 256);
      continue;
    }
    // Live pages: from the one holding the first row the last decoded token read.
    EXPECT_EQ(t.first_page, unit.page_of(unit.first_needed(n - 1))) << unit.name;
    EXPECT_LE(static_cast<int64_t>(t.blocks.size()), unit.peak_pages) << unit.name;
  }
  const auto used = kvtest::used_pages_from_tables(*f.m, {1});
  const KvCacheStats s = f.m->stats();
  for (size_t b = 0; b < s.pools.size(); ++b) {
    EXPECT_EQ(s.pools[b].used_pages, used[b]);
    EXPECT_EQ(s.pools[b].used_pages + s.pools[b].free_pages + s.pools[b].cached_pages, s.pools[b].capacity_pages);
  }
  EXPECT_EQ(f.store->live_mismatches(1, a, sa), 0);
}

TEST(KvCacheManager, PrefixHitGivesTheBytesOfAFreshComputation) {
  Fixture f;
  std::mt19937_64 rng(3);
  auto a = kvtest::random_tokens(rng, 1500);
  PrefixSignature sa("");
  EXPECT_EQ(f.prefill(1, a, sa), 0);
  f.m->free(1);
  // Same prompt, longer tail: resumes at the last prompt boundary of request 1 (1499 / 256 * 256).
  auto b = a;
  b.resize(1700);
  for (size_t i = 1500; i < b.size(); ++i) b[i] = static_cast<int32_t>(rng() % 1000);
  PrefixSignature sb("");
  f.m->add_request(2, 1700);
  const PrefixHit hit = f.m->lookup_prefix(2, b);
  EXPECT_EQ(hit.tokens, 1280);
  ASSERT_TRUE(f.m->allocate(2, 100, b, &hit));
  EXPECT_EQ(f.store->mismatches(2, b, sb, 0, 1280), 0);  // reused entries, never written by request 2
  f.store->write(2, b, sb, 1280, 1380);
  EXPECT_EQ(f.store->live_mismatches(2, b, sb), 0);
  // The same tokens under another salt share nothing.
  f.m->add_request(3, 1500, "other tenant");
  EXPECT_EQ(f.m->lookup_prefix(3, a).tokens, 0);
  // Counters: the second lookup was committed by allocate(); the third was not.
  const KvCacheStats s = f.m->stats();
  EXPECT_EQ(s.lookups, 2);
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.query_tokens, 1500 + 1700);
  EXPECT_EQ(s.hit_tokens, 1280);
  for (const auto& g : s.groups) {
    EXPECT_EQ(g.lookups, 2) << g.name;
    EXPECT_EQ(g.hits, 1) << g.name;  // the first lookup missed in every group
    EXPECT_EQ(g.hit_tokens, 1280) << g.name;
  }
  f.m->check_consistency();
}

// A request that reads no cached prefix (its prompt scored): its cached prompt is computed again, and its
// allocation counts no lookup.
TEST(KvCacheManager, EmptyPrefixReadsNothingAndCountsNoLookup) {
  Fixture f;
  std::mt19937_64 rng(5);
  const auto a = kvtest::random_tokens(rng, 1500);
  PrefixSignature sa("");
  EXPECT_EQ(f.prefill(1, a, sa), 0);
  f.m->free(1);
  f.m->add_request(2, 1500);
  ASSERT_EQ(f.m->lookup_prefix(2, a).tokens, 1280);  // it is there to read
  const PrefixHit none = f.m->empty_prefix(2);
  EXPECT_EQ(none.tokens, 0);
  ASSERT_TRUE(f.m->allocate(2, 1500, a, &none));
  EXPECT_EQ(f.m->num_tokens(2), 1500);
  f.store->write(2, a, sa, 0, 1500);
  EXPECT_EQ(f.store->live_mismatches(2, a, sa), 0);
  const KvCacheStats s = f.m->stats();
  EXPECT_EQ(s.lookups, 1);  // request 1's
  EXPECT_EQ(s.query_tokens, 1500);
  EXPECT_EQ(s.hit_tokens, 0);
  for (const auto& g : s.groups) EXPECT_EQ(g.lookups, 1) << g.name;
  f.m->check_consistency();
}

// Full groups could serve 768 tokens of a shorter prompt, but no window was retained there (interval 0):
// the per-group counters show where the hit was lost.
TEST(KvCacheManager, GroupCountersShowRetentionMisses) {
  Fixture f(KvCacheOptions{.retention_interval = 0});
  std::mt19937_64 rng(11);
  auto a = kvtest::random_tokens(rng, 2000);
  PrefixSignature sa("");
  f.prefill(1, a, sa);
  f.m->free(1);
  std::vector<int32_t> b(a.begin(), a.begin() + 1000);
  f.m->add_request(2, 1000);
  const PrefixHit hit = f.m->lookup_prefix(2, b);
  EXPECT_EQ(hit.tokens, 0);
  ASSERT_TRUE(f.m->allocate(2, 200, b, &hit));
  for (const auto& g : f.m->stats().groups) {
    const bool full = g.name == "c4.kv" || g.name == "c4.index" || g.name == "c128.kv";
    const bool empty_window = g.name == "c128.state";  // nothing to keep at a multiple of 128
    EXPECT_EQ(g.hit_tokens, full || empty_window ? 768 : 0) << g.name;
    EXPECT_EQ(g.hits, full || empty_window ? 1 : 0) << g.name;
  }
}

class Retention : public ::testing::TestWithParam<int64_t> {};

TEST_P(Retention, KeepsWindowsAtTheChosenBoundaries) {
  const int64_t interval = GetParam();
  Fixture f(KvCacheOptions{.retention_interval = interval});
  std::mt19937_64 rng(4);
  auto a = kvtest::random_tokens(rng, 2000);
  PrefixSignature sa("");
  f.prefill(1, a, sa, "", 700);
  f.m->free(1);
  for (int64_t t : {100, 257, 300, 513, 700, 1025, 1300, 1700, 1793, 1900, 2000, 2600}) {
    auto b = a;
    b.resize(static_cast<size_t>(t));
    for (size_t i = std::min<size_t>(2000, b.size()); i < b.size(); ++i) b[i] = 7;
    const int64_t cap = 256 * std::min<int64_t>((t - 1) / 256, 2000 / 256);
    int64_t want = 0;
    for (int64_t bnd = 256; bnd <= cap; bnd += 256) {
      if (interval == -1 || (interval > 0 && bnd % interval == 0) || bnd == 1792) want = bnd;
    }
    const KvRequestId id = 100 + static_cast<KvRequestId>(t);
    f.m->add_request(id, t);
    EXPECT_EQ(f.m->lookup_prefix(id, b).tokens, want) << "prompt " << t << " interval " << interval;
    f.m->free(id);
  }
}

INSTANTIATE_TEST_SUITE_P(Intervals, Retention, ::testing::Values(0, 512, -1));

TEST(KvCacheManager, StatsCountRetainedCheckpointBlocksPerGroup) {
  // Interval -1 keeps a window at every block boundary: more retained sliding blocks than interval 0.
  int64_t retained[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    Fixture f(KvCacheOptions{.retention_interval = k == 0 ? 0 : -1});
    std::mt19937_64 rng(9);
    auto a = kvtest::random_tokens(rng, 1500);
    PrefixSignature sa("");
    f.prefill(1, a, sa, "", 500);
    if (k == 0) {  // interval 0 retains only the last prompt boundary, at free; -1 retains while running too
      for (const auto& g : f.m->stats().groups) EXPECT_EQ(g.cached_blocks, 0) << g.name << ": nothing cached yet";
    }
    f.m->free(1);
    const KvCacheStats st = f.m->stats();
    for (const auto& g : st.groups) {
      const auto& u =
          f.layout.units[static_cast<size_t>(f.layout.unit_of_group[static_cast<size_t>(f.layout.find_group(g.name))])];
      // Full groups keep their blocks; the window keeps rows at the boundary (compressor states may need
      // none there: at 1280 a ratio-128 block has just closed).
      if (!u.sliding() || g.name == "swa") {
        EXPECT_GT(g.cached_blocks, 0) << g.name;
      }
      if (g.name == "swa") retained[k] = g.cached_blocks;
    }
    // Reusing the prefix takes the blocks back from the cache.
    f.m->add_request(2, 1500);
    const PrefixHit hit = f.m->lookup_prefix(2, a);
    ASSERT_GT(hit.tokens, 0);
    ASSERT_TRUE(f.m->allocate(2, 1500 - hit.tokens, a, &hit));
    int64_t after = 0;
    for (const auto& g : f.m->stats().groups) after += g.name == "swa" ? g.cached_blocks : 0;
    EXPECT_LT(after, retained[k]);
    f.m->check_consistency();
  }
  EXPECT_GT(retained[1], retained[0]);
}

// At vLLM's interval 0 (dense retention keys the decode's windows too, so they are not free to reuse).
TEST(KvCacheManager, FreedWindowsAreReusedBeforeCachedBlocksAreEvicted) {
  Fixture f(KvCacheOptions{.retention_interval = 0}, 4096, 3);
  std::mt19937_64 rng(5);
  auto a = kvtest::random_tokens(rng, 2000), b = kvtest::random_tokens(rng, 300);
  PrefixSignature sa(""), sb("");
  f.prefill(1, a, sa);
  f.m->free(1);
  const auto cached_before = f.m->stats().pools;
  f.prefill(2, b, sb);
  f.decode(2, b, sb, 3000, rng);  // thousands of sliding pages come and go
  const KvCacheStats s = f.m->stats();
  for (size_t i = 0; i < s.pools.size(); ++i) {
    EXPECT_EQ(s.pools[i].evictions, 0u);
    EXPECT_GE(s.pools[i].cached_pages, cached_before[i].cached_pages);
  }
  f.m->add_request(3, 2000);
  EXPECT_EQ(f.m->lookup_prefix(3, a).tokens, 1792);
  f.m->check_consistency();
}

TEST(KvCacheManager, HitsAfterEvictionStillGiveFreshBytes) {
  // Room for one 3000-position request: a second request must evict part of the first one's cache.
  Fixture f(KvCacheOptions{.retention_interval = -1}, 3000, 1, 3000);
  std::mt19937_64 rng(6);
  auto a = kvtest::random_tokens(rng, 3000), b = kvtest::random_tokens(rng, 1200);
  PrefixSignature sa(""), sb("");
  f.prefill(1, a, sa, "", 3000);
  f.m->free(1);
  f.prefill(2, b, sb, "", 1200);
  uint64_t evictions = 0;
  for (const auto& p : f.m->stats().pools) evictions += p.evictions;
  EXPECT_GT(evictions, 0u);
  EXPECT_EQ(f.store->live_mismatches(2, b, sb), 0);
  f.m->free(2);
  PrefixSignature sc("");
  f.m->add_request(3, 3000);
  const PrefixHit hit = f.m->lookup_prefix(3, a);
  EXPECT_EQ(hit.tokens % 256, 0);
  EXPECT_LT(hit.tokens, 2816);  // some of request 1's blocks are gone
  for (const auto& g : hit.group_tokens) EXPECT_GE(g, hit.tokens);
  ASSERT_TRUE(f.m->allocate(3, 1, a, &hit));
  EXPECT_EQ(f.store->mismatches(3, a, sc, 0, hit.tokens), 0);
  f.m->check_consistency();
}

// vLLM's regression (SERVING.md §5.2): N long requests served one after another, whose full blocks plus one
// retained window each fit; replaying the first must still hit floor((len - 1) / 256) * 256 tokens. Denser
// intervals keep more windows than fit: those extra ones must go first, never a prompt's last window.
class Replay : public ::testing::TestWithParam<int64_t> {};

TEST_P(Replay, AfterOtherLongRequestsStillHits) {
  const int64_t interval = GetParam();
  const KvLayout l = make_kv_layout(kvtest::tiny_config(), {});
  const int n = 6;
  const int64_t len = 3000, chunk = 512;
  std::vector<int64_t> pages(l.buckets.size(), 0);
  for (const KvUnit& u : l.units) {
    const auto b = static_cast<size_t>(u.bucket);
    if (!u.sliding()) {
      pages[b] += (n * (len / 256) + 1) * u.num_layers();  // cached full blocks + the live partial one
      continue;
    }
    const int64_t bnd = (len - 1) / 256 * 256, lo = u.first_needed(bnd);
    const int64_t window = lo < bnd ? u.page_of(bnd - 1) - u.page_of(lo) + 1 : 0;
    const int64_t live = u.page_of(chunk + u.rule.window_rows()) + 2;  // one chunk in flight
    pages[b] += (n * window + live) * u.num_layers();
  }
  KvCacheManager m(l, pages, {.retention_interval = interval});
  std::mt19937_64 rng(7);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < n; ++i) {
    prompts.push_back(kvtest::random_tokens(rng, len));
    const auto id = static_cast<KvRequestId>(i + 1);
    m.add_request(id, len);
    const PrefixHit hit = m.lookup_prefix(id, prompts.back());
    ASSERT_EQ(hit.tokens, 0);
    ASSERT_TRUE(m.allocate(id, chunk, prompts.back(), &hit));
    for (int64_t done = chunk; done < len; done += chunk)
      ASSERT_TRUE(m.allocate(id, std::min(chunk, len - done), prompts.back()));
    std::vector<int32_t> t = prompts.back();
    for (int d = 0; d < 50; ++d) {  // some decoding, its windows sliding
      t.push_back(d);
      ASSERT_TRUE(m.allocate(id, 1, t));
    }
    m.free(id);
    m.check_consistency();
  }
  for (int i = 0; i < n; ++i) {
    const auto id = static_cast<KvRequestId>(100 + i);
    m.add_request(id, len);
    EXPECT_EQ(m.lookup_prefix(id, prompts[static_cast<size_t>(i)]).tokens, (len - 1) / 256 * 256) << "request " << i;
    m.free(id);
  }
  uint64_t evictions = 0;
  for (const auto& p : m.stats().pools) evictions += p.evictions;
  if (interval == 0) {
    EXPECT_EQ(evictions, 0u);
  } else if (interval == -1) {
    EXPECT_GT(evictions, 0u);  // the test is only a test if the extra windows did not fit
  }
}

INSTANTIATE_TEST_SUITE_P(Intervals, Replay, ::testing::Values(0, 512, -1));

TEST(KvCacheManager, RefusedAllocationChangesNothing) {
  const KvLayout l = make_kv_layout(kvtest::tiny_config(), {});
  KvCacheManager m(l, pages_for(l, 1024, 1, 1024));
  std::mt19937_64 rng(8);
  auto a = kvtest::random_tokens(rng, 5000);
  m.add_request(1, 5000);
  ASSERT_TRUE(m.allocate(1, 1000, a));
  const KvCacheStats before = m.stats();
  EXPECT_FALSE(m.can_allocate(1, 4000));
  EXPECT_FALSE(m.allocate(1, 4000, a));
  const KvCacheStats after = m.stats();
  for (size_t b = 0; b < before.pools.size(); ++b) {
    EXPECT_EQ(before.pools[b].free_pages, after.pools[b].free_pages);
    EXPECT_EQ(before.pools[b].used_pages, after.pools[b].used_pages);
  }
  EXPECT_EQ(m.num_tokens(1), 1000);
  EXPECT_TRUE(m.can_allocate(1, 1));
  m.check_consistency();
}

using ::dsv4::testing::error_of;

TEST(KvCacheManager, BadInputIsRefusedWithClearErrors) {
  const KvLayout l = make_kv_layout(kvtest::tiny_config(), {});
  const auto pages = pages_for(l, 2048, 1, 2048);
  EXPECT_EQ(error_of([&] { KvCacheManager m(l, pages, {.retention_interval = 300}); }),
            "KV cache: prefix cache retention interval must be 0, -1 or a positive multiple of 256, got 300");
  EXPECT_EQ(error_of([&] { KvCacheManager m(l, {1, 2}); }), "KV cache: 2 pool sizes given for 3 buckets");
  KvCacheManager m(l, pages);
  std::vector<int32_t> t(700, 5);
  EXPECT_EQ(error_of([&] { m.allocate(42, 1, t); }), "KV cache: unknown request 42");
  m.add_request(1, 600);
  EXPECT_EQ(error_of([&] { m.add_request(1, 600); }), "KV cache: request 1 is already registered");
  EXPECT_EQ(error_of([&] { m.add_request(2, -1); }), "KV cache: request 2 has a negative prompt length -1");
  EXPECT_EQ(error_of([&] { m.allocate(1, -3, t); }), "KV cache: cannot allocate -3 positions");
  EXPECT_EQ(error_of([&] { m.allocate(1, 701, t); }),
            "KV cache: request 1 allocates up to position 701 but only 700 token ids were given");
  ASSERT_TRUE(m.allocate(1, 600, t));
  ASSERT_TRUE(m.allocate(1, 1, t));  // releases the window of the first chunk
  EXPECT_EQ(error_of([&] { (void)m.slot(1, 0, 3); }),
            "KV cache: position 3 of request 1 has no live page in unit swa (601 positions allocated)");
  EXPECT_EQ(m.slot(1, 0, 600) >= 0, true);
  EXPECT_EQ(error_of([&] { (void)m.slot(1, 9, 3); }), "KV cache: no unit 9");
  const PrefixHit late = m.lookup_prefix(1, t);
  EXPECT_EQ(error_of([&] { m.allocate(1, 1, t, &late); }),
            "KV cache: a prefix hit can only start a request (it holds 601 positions)");
  m.free(1);
  EXPECT_EQ(error_of([&] { m.free(1); }), "KV cache: unknown request 1");
}

TEST(KvCacheManager, StaleHitIsRefused) {
  const KvLayout l = make_kv_layout(kvtest::tiny_config(), {});
  KvCacheManager m(l, pages_for(l, 2048, 1, 2048));
  std::mt19937_64 rng(9);
  auto a = kvtest::random_tokens(rng, 2000), b = kvtest::random_tokens(rng, 2000);
  m.add_request(1, 2000);
  ASSERT_TRUE(m.allocate(1, 2000, a));
  m.free(1);
  m.add_request(2, 2000);
  const PrefixHit hit = m.lookup_prefix(2, a);
  ASSERT_GT(hit.tokens, 0);
  m.add_request(3, 2000);
  ASSERT_TRUE(m.allocate(3, 2000, b));  // evicts request 1's cached blocks
  EXPECT_EQ(error_of([&] { m.allocate(2, 10, a, &hit); }),
            "KV cache: stale prefix hit (blocks were evicted after lookup_prefix)");
}

TEST(KvCacheManager, StartupRefusesPoolsThatCannotHoldOneMaxLengthRequest) {
  const KvLayout l = make_kv_layout(kvtest::tiny_config(), {});
  std::vector<int64_t> pages = pages_for(l, 4096, 1);
  pages[2] = 10;
  const std::string e = error_of([&] { KvCacheManager m(l, pages, {.max_model_len = 4096}); });
  const KvBucket& b = l.buckets[2];
  int64_t need = 0;
  for (int u : b.units)
    need += l.units[static_cast<size_t>(u)].pages_for(4096) * l.units[static_cast<size_t>(u)].num_layers();
  EXPECT_NE(e.find("KV cache cannot hold one request of max_model_len = 4096 tokens; pool 2"), std::string::npos) << e;
  EXPECT_NE(e.find(fmt::format("needs {} pages = {} B but has 10 pages = {} B", need, need * b.page_bytes,
                               10 * b.page_bytes)),
            std::string::npos)
      << e;
  EXPECT_EQ(e.find("pool 0"), std::string::npos) << e;
  KvCacheManager fine(l, pages_for(l, 4096, 1), {.max_model_len = 4096});
}

TEST(KvCacheManager, PrefixCachingOffNeverHits) {
  const KvLayout l = make_kv_layout(kvtest::tiny_config(), {});
  KvCacheManager m(l, pages_for(l, 2048, 2), {.enable_prefix_caching = false});
  std::mt19937_64 rng(10);
  auto a = kvtest::random_tokens(rng, 1000);
  m.add_request(1, 1000);
  ASSERT_TRUE(m.allocate(1, 1000, {}));  // no token ids needed
  m.free(1);
  m.add_request(2, 1000);
  EXPECT_EQ(m.lookup_prefix(2, a).tokens, 0);
  const KvCacheStats s = m.stats();
  for (const auto& p : s.pools) EXPECT_EQ(p.cached_pages, 0);
}

}  // namespace
}  // namespace dsv4
