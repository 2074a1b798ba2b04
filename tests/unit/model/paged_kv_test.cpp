// PagedKv: the page lists it gives for long runs of compressed entries (rows of its device block
// tables) expand, through each layer's page map, to exactly the slots slot() names one by one, for
// every layer and kind, in a cache whose pages were handed out interleaved between sequences.
#include "model/paged_kv.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>

#include "core/error.h"
#include "model_tools/presets.h"

namespace dsv4 {
namespace {

// The page an item_pages entry names for the layer of `m` (on a host device the map is host memory).
int32_t page_of(const BlockPageMap& m, int32_t entry) {
  if (!m.pages) return entry;
  EXPECT_TRUE(entry >= m.first_block && entry < m.first_block + m.blocks) << "block " << entry;
  return m.pages[int64_t{entry - m.first_block} * m.layers + m.layer];
}

// Three sequences of `lens` (the first the longest) in a cache of room for `room` positions each, allocated
// `chunk` positions a turn: pages of the sequences alternate.
std::unique_ptr<OwnedPagedCache> interleaved(const ModelConfig& c, const int64_t (&lens)[3], int64_t room,
                                             int64_t chunk, uint32_t seed) {
  auto cache = std::make_unique<OwnedPagedCache>(c, 3, room, room);
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(room));
  for (auto& x : ids) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(c.vocab_size));
  for (int32_t s = 0; s < 3; ++s) cache->add(s, lens[s]);
  for (int64_t at = 0; at < lens[0]; at += chunk)
    for (int32_t s = 0; s < 3; ++s) {
      const int64_t n = std::min<int64_t>(chunk, lens[s] - at);
      if (n > 0) cache->allocate(s, n, std::span<const int32_t>(ids.data(), static_cast<size_t>(at + n)));
    }
  return cache;
}

TEST(PagedKv, ItemPagesExpandToTheSlotsOfEveryEntry) {
  const ModelConfig c = find_preset("tiny").config;
  HostDevice dev;  // outlives the cache's page maps
  const int64_t lens[3] = {2900, 1000, 517};
  const auto cache = interleaved(c, lens, 3000, 300, 1);
  cache->access().sync(dev);
  const PagedKv& kv = cache->access();
  int checked_pages = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    const int ratio = c.compress_ratio(l);
    if (ratio == 0) continue;
    for (const KvKind kind : {KvKind::kCompressed, KvKind::kIndexerKey}) {
      if (kind == KvKind::kIndexerKey && ratio != 4) continue;
      for (int32_t s = 0; s < 3; ++s) {
        const int64_t n = lens[s] / ratio;
        const ItemPages p = kv.item_pages(s, l, kind, 0, n);
        EXPECT_EQ(p.per_page, 256 / ratio) << "one lookup per page of a full unit";
        // A full unit's lists are the requests' rows of its device block tables (host memory here).
        ASSERT_TRUE(p.device.table && p.pages.empty() && p.base == 0);
        ASSERT_TRUE(p.device.row >= 0 && p.device.row < p.device.rows);
        ASSERT_LE((n + p.per_page - 1) / p.per_page, p.device.stride);
        const int32_t* row = p.device.table + int64_t{p.device.row} * p.device.stride;
        for (int64_t j = 0; j < n; ++j) {
          const int32_t page = page_of(kv.page_map(l, kind), row[j / p.per_page]);
          ASSERT_EQ(page * p.per_page + j % p.per_page, kv.slot(s, l, kind, j)) << "layer " << l << " seq " << s;
        }
        checked_pages += static_cast<int>((n + p.per_page - 1) / p.per_page);
      }
    }
  }
  EXPECT_GT(checked_pages, 20);
}

// layer_slots (a step's per-token slots, a layer at a time) names the slot slot() names, for every layer
// and kind, with −1 kept; a unit slot of another unit's block is refused.
TEST(PagedKv, LayerSlotsOfManyTokensAreEachTokensSlot) {
  const ModelConfig c = find_preset("tiny").config;
  const int64_t lens[3] = {1900, 700, 333};
  const auto cache = interleaved(c, lens, 2000, 250, 2);
  const PagedKv& kv = cache->access();
  int64_t checked = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    for (const KvKind kind : {KvKind::kWindow, KvKind::kCompressorState, KvKind::kCompressed}) {
      const int ratio = c.compress_ratio(l);
      if (ratio == 0 && kind != KvKind::kWindow) continue;
      std::vector<int64_t> unit;
      std::vector<int32_t> want;
      for (int32_t s = 0; s < 3; ++s) {
        const int64_t items = kind == KvKind::kCompressed ? lens[s] / ratio : lens[s];
        for (int k = 0; k < 12; ++k) {  // the last items (a window's live positions), each with a −1 after it
          const int64_t i = items - 1 - k * 3;
          if (i < 0) break;
          const int64_t u = kv.unit_slot(s, l, kind, i);
          if (u < 0) continue;
          unit.push_back(u);
          want.push_back(kv.slot(s, l, kind, i));
          unit.push_back(-1);
          want.push_back(-1);
        }
      }
      std::vector<int32_t> got(unit.size(), 7);
      kv.layer_slots(l, kind, unit, got);
      EXPECT_EQ(got, want) << "layer " << l << " kind " << static_cast<int>(kind);
      for (size_t i = 0; i < unit.size(); ++i) EXPECT_EQ(kv.layer_slot(l, kind, unit[i]), want[i]);
      checked += static_cast<int64_t>(unit.size());
    }
  }
  EXPECT_GT(checked, 200);
  // A unit slot past every block of the pool names no page.
  std::vector<int64_t> wild = {int64_t{1} << 40};
  std::vector<int32_t> out(1);
  EXPECT_THROW(kv.layer_slots(0, KvKind::kWindow, wild, out), Error);
}

TEST(PagedKv, WindowPagesExpandToTheSlotsOfTheLastPositions) {
  const ModelConfig c = find_preset("tiny").config;
  HostDevice dev;  // outlives the cache's page maps
  OwnedPagedCache cache(c, 2, 3000, 3000);
  std::vector<int32_t> ids(3000, 5);
  cache.add(0, 2000);
  cache.add(1, 700);
  for (int64_t at = 0; at < 2000; at += 500)
    for (int32_t s = 0; s < 2; ++s)
      if (at < (s == 0 ? 2000 : 700))
        cache.allocate(s, std::min<int64_t>(500, (s == 0 ? 2000 : 700) - at),
                       std::span<const int32_t>(ids.data(), static_cast<size_t>(std::min<int64_t>(at + 500, 2000))));
  cache.access().sync(dev);
  const PagedKv& kv = cache.access();
  for (int l = 0; l < c.n_layers; ++l)
    for (int32_t s = 0; s < 2; ++s) {
      const int64_t end = s == 0 ? 2000 : 700, begin = end - 200;  // the last chunk's window reach
      const ItemPages p = kv.item_pages(s, l, KvKind::kWindow, begin, end);
      EXPECT_EQ(p.base % p.per_page, 0);
      for (int64_t i = begin; i < end; ++i)
        ASSERT_EQ(page_of(kv.page_map(l, KvKind::kWindow), p.pages[static_cast<size_t>((i - p.base) / p.per_page)]) *
                          p.per_page +
                      i % p.per_page,
                  kv.slot(s, l, KvKind::kWindow, i))
            << "layer " << l << " seq " << s << " position " << i;
    }
}

// A model of sliding-window layers only (ratio 0, as V4-Flash's first two layers are) has no full unit
// to fill: the cache is the first split that holds the windows, and serves a long sequence.
TEST(PagedKv, AModelOfWindowsOnlyGetsACache) {
  ModelConfig c = find_preset("tiny").config;
  c.n_layers = 2;
  c.compress_ratios = {0, 0, 0};
  OwnedPagedCache cache(c, 2, 5000, 5000);
  cache.add(0, 4000);
  std::vector<int32_t> ids(4000, 7);
  EXPECT_NO_THROW(cache.allocate(0, 4000, ids));
}

}  // namespace
}  // namespace dsv4
