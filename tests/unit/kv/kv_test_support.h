// Test support for kv/: a tiny V4-shaped config, and a host backing store that writes a deterministic
// synthetic value into every entry the cache hands out, so that any later read can be checked against
// what a fresh computation of the same token prefix would have written.
#pragma once

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/model_config.h"
#include "kv/kv_cache_manager.h"

namespace dsv4::kvtest {

// Six main layers [0, 4, 128, 4, 128, 4] + MTP, head_dim 128 (64 rope), indexer 64 dims.
inline ModelConfig tiny_config(int window = 128) {
  ModelConfig c;
  c.n_layers = 6;
  c.head_dim = 128;
  c.rope_head_dim = 64;
  c.index_head_dim = 64;
  c.window_size = window;
  c.compress_ratios = {0, 4, 128, 4, 128, 4, 0};
  return c;
}

// V4-Pro's layer schedule (MODEL.md §1.2) with V4's attention dims.
inline ModelConfig pro_like_config() {
  ModelConfig c = v4_flash_config();
  c.n_layers = 61;
  c.compress_ratios = {128, 128};
  for (int i = 2; i < 61; ++i) c.compress_ratios.push_back(i % 2 == 0 ? 4 : 128);
  c.compress_ratios.push_back(0);
  return c;
}

inline std::vector<int32_t> random_tokens(std::mt19937_64& rng, size_t n) {
  std::uniform_int_distribution<int32_t> d(0, 129279);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = d(rng);
  return t;
}

// Hash of tokens [0, p] under a salt: what a real forward pass's output at p depends on.
class PrefixSignature {
 public:
  explicit PrefixSignature(std::string salt) : seed_(XXH3_64bits(salt.data(), salt.size())) {}
  uint64_t at(const std::vector<int32_t>& tokens, int64_t p) {
    while (static_cast<int64_t>(sig_.size()) <= p) {
      const uint64_t prev = sig_.empty() ? seed_ : sig_.back();
      const int32_t t = tokens[sig_.size()];
      sig_.push_back(XXH3_64bits_withSeed(&t, sizeof t, prev));
    }
    return sig_[static_cast<size_t>(p)];
  }

 private:
  uint64_t seed_;
  std::vector<uint64_t> sig_;
};

inline uint64_t synthetic_value(uint64_t prefix, int64_t p, int group, int layer) {
  const uint64_t tag[3] = {static_cast<uint64_t>(p), static_cast<uint64_t>(group), static_cast<uint64_t>(layer)};
  return XXH3_64bits_withSeed(tag, sizeof tag, prefix);
}

// Writes / checks the first and last 8 bytes of every entry of positions [start, end) of a request.
// `live_only`: sliding units only at positions still in their page table.
class BackingStore {
 public:
  explicit BackingStore(const KvCacheManager& m) : m_(m) {}

  void write(KvRequestId id, const std::vector<int32_t>& tokens, PrefixSignature& sig, int64_t start, int64_t end) {
    visit(id, tokens, sig, start, end, [](std::byte* e, int64_t bytes, uint64_t v) {
      std::memcpy(e, &v, 8);
      const uint64_t w = ~v;
      std::memcpy(e + bytes - 8, &w, 8);
      return true;
    });
  }

  // Number of entries whose bytes differ from a fresh computation.
  int64_t mismatches(KvRequestId id, const std::vector<int32_t>& tokens, PrefixSignature& sig, int64_t start,
                     int64_t end) {
    int64_t bad = 0;
    visit(id, tokens, sig, start, end, [&](std::byte* e, int64_t bytes, uint64_t v) {
      uint64_t a = 0, b = 0;
      std::memcpy(&a, e, 8);
      std::memcpy(&b, e + bytes - 8, 8);
      bad += (a != v || b != ~v);
      return true;
    });
    return bad;
  }

  // Every entry the request can read now: all compressed entries, the live rows of sliding units.
  int64_t live_mismatches(KvRequestId id, const std::vector<int32_t>& tokens, PrefixSignature& sig) {
    return mismatches(id, tokens, sig, 0, m_.num_tokens(id));
  }

 private:
  template <typename F>
  void visit(KvRequestId id, const std::vector<int32_t>& tokens, PrefixSignature& sig, int64_t start, int64_t end,
             F&& f) {
    const KvLayout& l = m_.layout();
    for (int u = 0; u < static_cast<int>(l.units.size()); ++u) {
      const KvUnit& unit = l.units[static_cast<size_t>(u)];
      const KvBlockTable t = m_.block_table(id, u);
      for (int64_t p = start; p < end; ++p) {
        const int64_t q = unit.page_of(p);
        if (q < t.first_page || q >= t.first_page + static_cast<int64_t>(t.blocks.size())) continue;
        const int64_t slot = m_.slot(id, u, p);
        if (slot < 0) continue;
        const uint64_t prefix = sig.at(tokens, p);
        for (int g : unit.groups) {
          const int64_t bytes = l.groups[static_cast<size_t>(g)].entry_bytes;
          for (int layer = 0; layer < unit.num_layers(); ++layer) {
            f(m_.entry_address(g, layer, slot), bytes, synthetic_value(prefix, p, g, layer));
          }
        }
      }
    }
  }

  const KvCacheManager& m_;
};

// used pages seen from outside: the distinct blocks all request tables hold, times their unit's layers.
inline std::vector<int64_t> used_pages_from_tables(const KvCacheManager& m, const std::vector<KvRequestId>& ids) {
  const KvLayout& l = m.layout();
  std::vector<std::vector<uint8_t>> seen(l.buckets.size());
  std::vector<int64_t> used(l.buckets.size(), 0);
  for (KvRequestId id : ids) {
    for (int u = 0; u < static_cast<int>(l.units.size()); ++u) {
      const auto b = static_cast<size_t>(l.units[static_cast<size_t>(u)].bucket);
      for (uint32_t blk : m.block_table(id, u).blocks) {
        if (seen[b].size() <= blk) seen[b].resize(blk + 1, 0);
        if (!seen[b][blk]) used[b] += l.units[static_cast<size_t>(u)].num_layers();
        seen[b][blk] = 1;
      }
    }
  }
  return used;
}

// Room for `requests` requests of `tokens` positions each (one of them mid-chunk), per pool.
inline std::vector<int64_t> pages_for(const KvLayout& l, int64_t tokens, int64_t requests, int64_t chunk = 512) {
  std::vector<int64_t> pages(l.buckets.size(), 0);
  for (const KvUnit& u : l.units) {
    const int64_t live = u.sliding() ? u.peak_pages + chunk / u.positions_per_page + 2 : u.pages_for(tokens);
    pages[static_cast<size_t>(u.bucket)] += requests * live * u.num_layers();
  }
  return pages;
}

// A manager over host memory with a backing store, and the steps of a request.
struct Fixture {
  explicit Fixture(KvCacheOptions o = {}, int64_t tokens = 4096, int64_t requests = 4, int64_t chunk = 512)
      : layout(make_kv_layout(kvtest::tiny_config(), {})) {
    o.memory = &host;
    o.host_memory = &host_tier;  // used only when o.host_tier_bytes > 0
    o.copier = &copier;
    m = std::make_unique<KvCacheManager>(layout, pages_for(layout, tokens, requests, chunk), o);
    store = std::make_unique<BackingStore>(*m);
  }
  // add + lookup + allocate the prompt in chunks, writing every new entry; returns the prefix hit.
  int64_t prefill(KvRequestId id, const std::vector<int32_t>& tokens, PrefixSignature& sig,
                  const std::string& salt = "", int64_t chunk = 300) {
    m->add_request(id, static_cast<int64_t>(tokens.size()), salt);
    const PrefixHit hit = m->lookup_prefix(id, tokens);
    int64_t done = hit.tokens;
    const int64_t n0 = std::min<int64_t>(chunk, static_cast<int64_t>(tokens.size()) - done);
    EXPECT_TRUE(m->allocate(id, n0, tokens, &hit));
    store->write(id, tokens, sig, done, done + n0);
    for (done += n0; done < static_cast<int64_t>(tokens.size()); done += chunk) {
      const int64_t n = std::min<int64_t>(chunk, static_cast<int64_t>(tokens.size()) - done);
      EXPECT_TRUE(m->allocate(id, n, tokens));
      store->write(id, tokens, sig, done, done + n);
    }
    return hit.tokens;
  }
  void decode(KvRequestId id, std::vector<int32_t>& tokens, PrefixSignature& sig, int steps, std::mt19937_64& rng) {
    for (int i = 0; i < steps; ++i) {
      tokens.push_back(static_cast<int32_t>(rng() % 1000));
      ASSERT_TRUE(m->allocate(id, 1, tokens));
      const auto p = static_cast<int64_t>(tokens.size()) - 1;
      store->write(id, tokens, sig, p, p + 1);
    }
  }

  HostKvMemory host, host_tier;
  MemcpyKvPageCopier copier;
  KvLayout layout;
  std::unique_ptr<KvCacheManager> m;
  std::unique_ptr<BackingStore> store;
};

}  // namespace dsv4::kvtest
