// Geometry of the paged KV cache: which groups share a block id, how many positions a page holds, and
// which pool (size bucket) each page lives in. docs/kv_cache.md works the V4-Flash numbers through.
//
// Units. Groups that always allocate together (same kind, layers, ratio and window) share one block id:
// c4.kv with c4.index, c4.state with c4.index.state. A unit is the thing the manager allocates.
//
// Pages. A unit's block holds one *layer page* per layer of the unit, each of the bucket's page size;
// inside a layer page every member's entries are stored one after the other (member_offsets). Full units
// hold one 256-position block (256/ratio entries); sliding units hold `positions_per_page` rows and live
// only while inside their window (or retained for prefix caching), never in 256-position pages.
//
// Buckets. Layer pages of all units fall into at most 3 sizes, one pool each. make_kv_layout() picks the
// rows per sliding page and the grouping that minimise the worst per-unit waste (page padding plus window
// rounding); V4-Flash and V4-Pro stay below 1.6% in every dtype combination.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kv/kv_group.h"

namespace dsv4 {

inline constexpr int kMaxKvBuckets = 3;
inline constexpr double kMaxKvWaste = 0.03;
inline constexpr int64_t kKvPageAlign = 16;  // bytes; every bucket page size is a multiple

// Division by a fixed positive divisor; a shift when it is a power of two (the common case).
struct KvDivisor {
  int64_t d = 1;
  int shift = 0;  // -1: not a power of two

  static KvDivisor of(int64_t v) {
    KvDivisor r{v, -1};
    if (v > 0 && (v & (v - 1)) == 0) r.shift = std::countr_zero(static_cast<uint64_t>(v));
    return r;
  }
  int64_t div(int64_t x) const { return shift >= 0 ? x >> shift : x / d; }  // x >= 0
  int64_t mod(int64_t x) const { return shift >= 0 ? x & (d - 1) : x % d; }
};

struct KvUnit {
  std::string name;  // member names joined by '+'
  KvGroupKind kind = KvGroupKind::kFull;
  std::vector<int> groups;              // indices into KvLayout::groups
  std::vector<int64_t> member_offsets;  // byte offset of each member's first entry inside a layer page
  std::vector<int> layers;              // main-model layer indices
  int ratio = 1;
  int64_t row_bytes = 0;            // one entry of every member, summed
  int64_t positions_per_page = 0;   // native positions one page covers
  int64_t entries_per_page = 0;     // entries of each member in one layer page
  int64_t period = kKvBlockTokens;  // pages never straddle a multiple of the period (it divides 256)
  int64_t peak_pages = 1;           // sliding: the most pages live at once in steady decoding; full: 1
  int bucket = -1;
  KvGroupSpec rule;  // the members' common window rule

  // Sets the page geometry: `rows` positions per page for sliding units (full units: one 256 block).
  void set_rows(int64_t rows);

  int num_layers() const { return static_cast<int>(layers.size()); }
  bool sliding() const { return kind == KvGroupKind::kSliding; }
  int64_t pages_per_period() const { return ppp_.d; }
  // Page index (in the request's logical page sequence) holding position p >= 0.
  int64_t page_of(int64_t p) const { return period_.div(p) * ppp_.d + rows_.div(period_.mod(p)); }
  // Entry of p inside its page, or -1 when p stores nothing here (full units store one entry per ratio).
  int64_t entry_in_page(int64_t p) const {
    if (!sliding()) return ratio_.mod(p + 1) == 0 ? ratio_.div(p & (kKvBlockTokens - 1)) : -1;
    return rows_.mod(period_.mod(p));
  }
  // First position of a page, and one past its last (pages of a period are contiguous).
  int64_t page_begin(int64_t page) const { return ppp_.div(page) * period + ppp_.mod(page) * positions_per_page; }
  int64_t page_end(int64_t page) const {
    return std::min(page_begin(page) + positions_per_page, (ppp_.div(page) + 1) * period);
  }
  int64_t first_needed(int64_t p) const { return rule.first_needed(p); }
  // Sliding units: the pages [first, last] a request resuming at `boundary` (> 0) reads; first > last
  // when it reads none here.
  std::pair<int64_t, int64_t> resume_pages(int64_t boundary) const {
    const int64_t lo = first_needed(boundary);
    if (lo >= boundary) return {1, 0};
    return {page_of(lo), page_of(boundary - 1)};
  }
  // The first position p from which first_needed(p) >= pos (no row before pos is read any more).
  int64_t release_position(int64_t pos) const;
  // Pages a request of `tokens` positions holds in steady decoding (sliding: the most live at once).
  int64_t pages_for(int64_t tokens) const;
  int64_t content_bytes() const { return entries_per_page * row_bytes; }  // used bytes of a layer page

 private:
  KvDivisor period_, rows_, ppp_, ratio_;
};

struct KvBucket {
  int64_t page_bytes = 0;
  std::vector<int> units;
};

struct KvLayout {
  std::vector<KvGroupSpec> groups;
  std::vector<KvUnit> units;
  std::vector<KvBucket> buckets;
  std::vector<int> unit_of_group;
  std::vector<int> member_of_group;  // index of the group inside its unit

  const KvBucket& bucket_of(int unit) const { return buckets.at(static_cast<size_t>(units.at(unit).bucket)); }
  // Bytes the pools charge one request of `tokens` positions for this unit (page rounding included).
  int64_t allocated_bytes(int unit, int64_t tokens) const;
  // 1 − needed / allocated at long context: page padding for full units, plus window rounding for sliding.
  double waste(int unit) const;
  double max_waste() const;
  int find_group(const std::string& name) const;  // -1 when absent
};

// The layout for a config and cache dtypes. Throws dsv4::Error when the config has no layers.
KvLayout make_kv_layout(const ModelConfig& c, KvDTypes dtypes);
KvLayout make_kv_layout(std::vector<KvGroupSpec> groups);

}  // namespace dsv4
