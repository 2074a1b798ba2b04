// Property test: a random serving workload (add with shared prefixes and salts, prefill chunks, decode,
// abort, finish, preemption and eviction under memory pressure, with and without a host tier), checking after every
// operation that no block leaks or is freed twice, reference counts match the tables, used + free + cached equals the
// capacity of every pool, and every entry a request can read holds what a fresh computation would write.
#include <gtest/gtest.h>

#include <memory>
#include <random>

#include "kv/kv_cache_manager.h"
#include "unit/kv/kv_test_support.h"

namespace dsv4 {
namespace {

using kvtest::BackingStore;
using kvtest::PrefixSignature;

struct Live {
  KvRequestId id = 0;
  std::vector<int32_t> tokens;
  int64_t prompt_len = 0;
  std::unique_ptr<PrefixSignature> sig;
};

class Workload {
 public:
  // host_share: the host tier's bytes as a share of the pools' (0 = off).
  Workload(uint64_t seed, int64_t retention, int window, double host_share)
      : rng_(seed), layout_(make_kv_layout(kvtest::tiny_config(window), {})) {
    std::vector<int64_t> pages(layout_.buckets.size(), 0);
    for (const KvUnit& u : layout_.units) {  // about four 2500-position requests at once
      const int64_t per = u.sliding() ? u.peak_pages + 600 / u.positions_per_page + 2 : u.pages_for(2500);
      pages[static_cast<size_t>(u.bucket)] += 4 * per * u.num_layers();
    }
    int64_t bytes = 0;
    for (size_t b = 0; b < pages.size(); ++b) bytes += pages[b] * layout_.buckets[b].page_bytes;
    m_ = std::make_unique<KvCacheManager>(
        layout_, pages,
        KvCacheOptions{.retention_interval = retention,
                       .memory = &host_,
                       .host_tier_bytes = static_cast<int64_t>(host_share * static_cast<double>(bytes)),
                       .host_memory = &host_tier_,
                       .copier = &copier_});
    store_ = std::make_unique<BackingStore>(*m_);
  }

  void run(int ops) {
    for (int i = 0; i < ops; ++i) {
      const int pick = static_cast<int>(rng_() % 100);
      if (live_.empty() || pick < 18) {
        add();
      } else if (pick < 78) {
        grow(live_[rng_() % live_.size()]);
      } else {
        remove(rng_() % live_.size());  // abort mid-prefill or finish after decoding
      }
      check_all(i % 256 == 0);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }

  // Ends every request: then no page may be in use, and the pools and the host tier must add up.
  void free_all() {
    while (!live_.empty()) remove(live_.size() - 1);
    ASSERT_NO_THROW(m_->check_consistency());
    for (const KvPoolStats& p : m_->stats().pools) ASSERT_EQ(p.used_pages, 0);
  }

  const KvCacheManager& manager() const { return *m_; }
  int64_t preemptions = 0, hits = 0;

 private:
  std::vector<int32_t> new_prompt() {
    const auto len = static_cast<size_t>(1 + rng_() % 2500);
    std::vector<int32_t> t;
    if (!history_.empty() && rng_() % 2) {  // share a prefix of an earlier prompt
      const auto& old = history_[rng_() % history_.size()];
      t.assign(old.begin(), old.begin() + static_cast<std::ptrdiff_t>(std::min(len, 1 + rng_() % old.size())));
    }
    const auto tail = kvtest::random_tokens(rng_, len > t.size() ? len - t.size() : 0);
    t.insert(t.end(), tail.begin(), tail.end());
    return t;
  }

  void add() {
    Live r;
    r.id = next_id_++;
    r.tokens = new_prompt();
    r.prompt_len = static_cast<int64_t>(r.tokens.size());
    const std::string salt = rng_() % 5 == 0 ? "tenant-" + std::to_string(rng_() % 2) : "";
    r.sig = std::make_unique<PrefixSignature>(salt);
    history_.push_back(r.tokens);
    if (history_.size() > 40) history_.erase(history_.begin());
    m_->add_request(r.id, r.prompt_len, salt);
    const PrefixHit hit = m_->lookup_prefix(r.id, r.tokens);
    ASSERT_EQ(hit.tokens % 256, 0);
    ASSERT_LT(hit.tokens, r.prompt_len);
    const int64_t n = std::min<int64_t>(1 + static_cast<int64_t>(rng_() % 600), r.prompt_len - hit.tokens);
    if (!m_->allocate(r.id, n, r.tokens, &hit)) {
      m_->free(r.id);
      ++preemptions;
      return;
    }
    hits += hit.tokens > 0;
    ASSERT_EQ(store_->mismatches(r.id, r.tokens, *r.sig, 0, hit.tokens), 0) << "prefix hit of " << hit.tokens;
    store_->write(r.id, r.tokens, *r.sig, hit.tokens, hit.tokens + n);
    live_.push_back(std::move(r));
  }

  void grow(Live& r) {
    const int64_t have = m_->num_tokens(r.id);
    int64_t n = 1;
    if (have < r.prompt_len) {
      n = std::min<int64_t>(1 + static_cast<int64_t>(rng_() % 600), r.prompt_len - have);
    } else {
      n = 1 + static_cast<int64_t>(rng_() % 3);  // decode, sometimes several tokens (speculation)
      const auto more = kvtest::random_tokens(rng_, static_cast<size_t>(n));
      r.tokens.insert(r.tokens.end(), more.begin(), more.end());
    }
    if (!m_->allocate(r.id, n, r.tokens)) {  // out of memory: preempt
      remove(static_cast<size_t>(&r - live_.data()));
      ++preemptions;
      return;
    }
    store_->write(r.id, r.tokens, *r.sig, have, have + n);
    ASSERT_EQ(store_->mismatches(r.id, r.tokens, *r.sig, std::max<int64_t>(0, have - 300), have + n), 0);
  }

  void remove(size_t i) {
    m_->free(live_[i].id);
    live_.erase(live_.begin() + static_cast<std::ptrdiff_t>(i));
  }

  void check_all(bool bytes) {
    ASSERT_NO_THROW(m_->check_consistency());
    std::vector<KvRequestId> ids;
    for (const Live& r : live_) ids.push_back(r.id);
    const auto used = kvtest::used_pages_from_tables(*m_, ids);
    const KvCacheStats s = m_->stats();
    for (size_t b = 0; b < s.pools.size(); ++b) {
      const KvPoolStats& p = s.pools[b];
      ASSERT_EQ(p.used_pages, used[b]) << "pool " << b;
      ASSERT_EQ(p.used_pages + p.free_pages + p.cached_pages, p.capacity_pages) << "pool " << b;
    }
    if (!bytes) return;
    for (const Live& r : live_) ASSERT_EQ(store_->live_mismatches(r.id, r.tokens, *r.sig), 0) << "request " << r.id;
  }

  std::mt19937_64 rng_;
  HostKvMemory host_, host_tier_;
  MemcpyKvPageCopier copier_;
  KvLayout layout_;
  std::unique_ptr<KvCacheManager> m_;
  std::unique_ptr<BackingStore> store_;
  std::vector<Live> live_;
  std::vector<std::vector<int32_t>> history_;
  KvRequestId next_id_ = 1;
};

struct Case {
  uint64_t seed;
  int64_t retention;
  int window;
  int ops;
  double host_share = 0;
};

class KvProperty : public ::testing::TestWithParam<Case> {};

TEST_P(KvProperty, RandomWorkloadKeepsEveryInvariant) {
  const Case c = GetParam();
  Workload w(c.seed, c.retention, c.window, c.host_share);
  w.run(c.ops);
  w.free_all();
  const KvCacheStats s = w.manager().stats();
  uint64_t evictions = 0;
  for (const auto& p : s.pools) evictions += p.evictions;
  EXPECT_GT(w.hits, 0) << "the workload never hit the prefix cache";
  EXPECT_GT(evictions, 0u) << "the workload never evicted";
  EXPECT_GT(w.preemptions, 0) << "the workload never ran out of memory";
  EXPECT_GT(s.hit_tokens, 0);
  if (c.host_share > 0) {
    EXPECT_GT(s.host_hits, 0) << "the workload never restored from the host tier";
    EXPECT_GT(s.offload_bytes, 0);
  }
}

// 12,000 operations in all, over the three retention modes and two window sizes; then the same with a
// host tier (a small one that drops entries, a large one that keeps most), where every restored prefix
// must hold the bytes of a fresh computation.
INSTANTIATE_TEST_SUITE_P(Workloads, KvProperty,
                         ::testing::Values(Case{101, 0, 128, 4000}, Case{202, 512, 128, 4000},
                                           Case{303, -1, 64, 4000}));
INSTANTIATE_TEST_SUITE_P(HostTier, KvProperty,
                         ::testing::Values(Case{404, 0, 128, 3000, 0.5}, Case{505, -1, 128, 3000, 3.0},
                                           Case{606, 512, 64, 3000, 1.0}));

}  // namespace
}  // namespace dsv4
