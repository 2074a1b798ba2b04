// KvCacheManager: per-request block tables over the pools of a KvLayout, with prefix caching.
// It knows bytes and blocks, never kernels or layers' math; it never touches KV bytes.
//
// Vocabulary. A *unit* (kv_layout.h) is a group, or groups that allocate in lockstep (c4.kv+c4.index,
// c4.state+c4.index.state). Each request holds, per unit, a table of *blocks*; block b of a unit owns
// one layer page per layer of the unit in its bucket's pool. A unit's page index q covers native
// positions [page_begin(q), page_end(q)): full units one 256-position block, sliding units a few rows.
//
// Contract with the scheduler (single-threaded, called between forward passes):
//   add_request(id, prompt_len, salt)      before anything else for that request.
//   lookup_prefix(id, tokens) -> PrefixHit  longest prefix B (multiple of 256, B <= prompt_len - 1) from
//                                          which every group can resume: full units hold all blocks < B,
//                                          sliding units their window at B. Changes nothing but the
//                                          request's cached block hashes. Pass the hit to the next
//                                          allocate() of that request before any other allocation
//                                          (a hit made stale by an eviction is refused).
//   empty_prefix(id) -> PrefixHit          instead of lookup_prefix for a request that reads no cached
//                                          prefix: hit.tokens 0, no lookup counted.
//   can_allocate(id, n, hit) -> bool       whether allocate() would succeed now (no side effects).
//   allocate(id, n, tokens, hit) -> bool   room for the next n positions (a prefill chunk or a decode
//                                          token): first claims the hit (its positions count as computed),
//                                          releases sliding pages that left the window, then allocates.
//                                          false = not enough memory and nothing changed (preempt or wait).
//                                          `tokens` holds the request's ids up to at least the new end (used
//                                          for block hashes; may be empty when prefix caching is off).
//                                          The bytes of the new positions are valid once the step has run.
//   free(id)                               finish, abort or preempt: every block is released; full
//                                          blocks and retained windows stay cached (evictable).
// For the model runner, after allocate():
//   slot(id, unit, p)                      flat slot of position p: block * entries_per_page + entry, or -1
//                                          when p stores no entry in that unit (compressed units store one
//                                          per ratio positions). append_slots() does a range, for one unit
//                                          or all. Positions whose sliding page was released are refused.
//   block_table(id, unit)                  blocks of the request in page order from first_page (full units:
//                                          first_page 0, one per 256 positions; sliding units: live pages).
//   layer_pages(unit, block)               the pool page of each layer of the unit; entry_address() the bytes
//                                          when the pools have memory.
// Metrics: stats() — per pool free/used/cached pages (used + free + cached == capacity, exactly), per group
// prefix lookups, queried and hit tokens, and the host tier's pools and copies.
// Host tier (options.host_tier_bytes > 0, kv/host_tier.h): a keyed block the pools evict is copied to host
// pages first; lookup_prefix() first brings back, all or nothing, the blocks of the longest prefix that the
// two tiers hold together (their copies have finished when it returns), then answers from the device.
// Copies are issued in one batch per call (KvPageCopier) before allocate() or lookup_prefix() returns.
// Cost: allocate/free touch only the blocks they change (O(new tokens / page) + O(1) per unit);
// lookup_prefix is O(prompt blocks) (hashing plus one probe per block and unit).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/histogram.h"
#include "kv/block_pool.h"
#include "kv/host_tier.h"
#include "kv/kv_layout.h"
#include "kv/kv_memory.h"
#include "kv/kv_page_copy.h"

namespace dsv4 {

using KvRequestId = uint64_t;

struct KvCacheOptions {
  bool enable_prefix_caching = true;
  // Which sliding windows outlive their request for prefix caching (vLLM's semantics): 0 = only the last
  // prompt boundary of each request; N > 0 (a multiple of 256) = also every N positions; -1 = every block.
  // Every block by default: a prompt that shares any whole block with a recent one resumes there on every
  // group (with 0, a prompt that diverges before the other's last block recomputes everything). Windows
  // kept only for the interval are evicted before anything else (block_pool.h), so under memory pressure
  // this falls back to what 0 keeps: each prompt's full blocks and last window.
  int64_t retention_interval = -1;
  // When > 0 the pools must hold one request of this many positions, else the constructor throws.
  int64_t max_model_len = 0;
  // Backing bytes for the pools; null = bookkeeping only (planning, scheduling tests).
  KvMemoryAllocator* memory = nullptr;
  // Bytes of the host tier, split over the buckets as prefixes spend them (host_tier_pages); 0 = off. Needs prefix
  // caching (without it nothing is keyed), and with pool memory also host_memory (its pages) and copier.
  int64_t host_tier_bytes = 0;
  KvMemoryAllocator* host_memory = nullptr;
  KvPageCopier* copier = nullptr;
};

struct PrefixHit {
  int64_t tokens = 0;                 // positions that need no computing
  int64_t query_tokens = 0;           // the prompt length looked up (0: none, empty_prefix)
  std::vector<int64_t> group_tokens;  // per group: the longest prefix that group alone could serve
  // Nonzero while part of the hit is still coming back from the host tier in the background: the
  // request may not be admitted before restored(hit) (its pages are not yet there to read).
  uint64_t ticket = 0;
  // Read by allocate():
  uint64_t epoch = 0;
  std::vector<std::vector<uint32_t>> blocks;  // per unit, in page order
  std::vector<int64_t> first_page;            // per unit
};

struct KvBlockTable {
  int64_t first_page = 0;
  std::span<const uint32_t> blocks;
};

struct KvPoolStats {
  int64_t page_bytes = 0;
  int64_t capacity_pages = 0;
  int64_t free_pages = 0;
  int64_t used_pages = 0;
  int64_t cached_pages = 0;
  uint64_t evictions = 0;
};

// Prefix-cache counters, committed when a lookup's hit is claimed by allocate(). A group "hits" when it
// alone could serve some prefix (sliding groups: a window at or below the full groups' hit);
// misses = lookups - hits, missed tokens = query_tokens - hit_tokens.
struct KvGroupStats {
  std::string name;
  int64_t lookups = 0;
  int64_t hits = 0;
  int64_t query_tokens = 0;
  int64_t hit_tokens = 0;
  // Blocks of the group's unit kept only for the prefix cache; for sliding groups these are the rows
  // of retained checkpoints (windows that outlived their request).
  int64_t cached_blocks = 0;
  // Host tier: blocks of the group's unit copied out to it and brought back from it, and the group's
  // bytes of those blocks (its entries in every layer page; the pages' other groups count apart).
  int64_t host_offloaded_blocks = 0, host_restored_blocks = 0;
  int64_t host_offload_bytes = 0, host_restore_bytes = 0;
};

// Upper bounds (seconds) of the host tier's restore-latency histogram.
inline constexpr std::array<double, 12> kKvRestoreSecondsBuckets = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                                                    0.01,   0.025,   0.05,   0.1,   0.25,   1.0};

struct KvCacheStats {
  std::vector<KvPoolStats> pools;
  std::vector<KvGroupStats> groups;
  int64_t lookups = 0;
  int64_t hits = 0;
  int64_t query_tokens = 0;
  int64_t hit_tokens = 0;  // what every group could serve together
  int64_t running_requests = 0;
  // Host tier (empty pools when off): lookups that brought blocks back, and bytes copied each way.
  std::vector<KvHostTierStats> host_pools;
  int64_t host_hits = 0;
  int64_t host_restored_tokens = 0;  // prefix positions those lookups found only with the host tier
  int64_t offload_bytes = 0;
  int64_t restore_bytes = 0;
  // The copier's time for the restores' copies (KvPageCopier::restore_copy_seconds): restore_bytes over it
  // is the restores' bandwidth.
  double restore_copy_seconds = 0;
  // Wall time of each restore: from the lookup that starts it until its copies are seen landed (at the
  // next poll: the scheduler's next look at the waiting request).
  Histogram restore_seconds{kKvRestoreSecondsBuckets};
};

// Host pages per bucket for `bytes` of host tier, split as stored prefixes spend bytes per block under
// the prefix cache's retention interval (KvCacheOptions::retention_interval; 0: one window a prompt of
// kHostTierPromptTokens).
inline constexpr int64_t kHostTierPromptTokens = 16384;
std::vector<int64_t> host_tier_pages(const KvLayout& layout, int64_t bytes, int64_t retention_interval);

class KvCacheManager {
 public:
  // pool_pages[b]: layer pages of bucket b's pool. Throws dsv4::Error for bad options, and when
  // max_model_len is set and one such request does not fit (naming each pool's need and capacity).
  KvCacheManager(KvLayout layout, std::vector<int64_t> pool_pages, KvCacheOptions options = {});
  ~KvCacheManager();
  KvCacheManager(const KvCacheManager&) = delete;
  KvCacheManager& operator=(const KvCacheManager&) = delete;

  const KvLayout& layout() const { return layout_; }
  const KvCacheOptions& options() const { return options_; }
  // The host tier's memory per bucket ({first byte, bytes}; empty without the tier): a tensor-parallel
  // rank holding its own copy of the tiers mirrors every page copy at the same offsets.
  std::vector<std::pair<std::byte*, size_t>> host_tier_regions() const;
  // Replaces the page copier (between steps; one that also copies for the other ranks).
  void set_copier(KvPageCopier* copier);

  void add_request(KvRequestId id, int64_t prompt_len, std::string_view cache_salt = {});
  bool has_request(KvRequestId id) const { return requests_.count(id) != 0; }
  // Distinct for every add_request() of the manager's life: an id that comes back after free() gets a new
  // one. A full unit's block table only grows while its request lives (prefix hits are claimed into an
  // empty table), so (serial, blocks held) says what a mirror of the table already has.
  uint64_t request_serial(KvRequestId id) const;
  int64_t num_tokens(KvRequestId id) const;  // positions allocated so far

  PrefixHit lookup_prefix(KvRequestId id, std::span<const int32_t> tokens);
  // The hit of a request that reads no cached prefix (every position computed, e.g. to score its prompt):
  // nothing held, and no lookup for the prefix-cache statistics (query_tokens 0).
  PrefixHit empty_prefix(KvRequestId id);
  // Whether every page of the hit is in place (its background restores have landed); never waits.
  bool restored(const PrefixHit& hit) const;
  // Restores still in flight (their blocks held, their host pages not yet free).
  int64_t restores_in_flight() const { return static_cast<int64_t>(restores_.size()); }
  // Lets go of the restores that have landed (the scheduler calls it at each step: a restore whose
  // request was aborted holds its pages no longer than that).
  void poll_restores();
  bool can_allocate(KvRequestId id, int64_t num_new_tokens, const PrefixHit* hit = nullptr) const;
  bool allocate(KvRequestId id, int64_t num_new_tokens, std::span<const int32_t> tokens,
                const PrefixHit* hit = nullptr);
  void free(KvRequestId id);

  int64_t slot(KvRequestId id, int unit, int64_t position) const;
  void append_slots(KvRequestId id, int unit, int64_t start, int64_t count, std::vector<int64_t>& out) const;
  // All units at once (out[u] for unit u; resized to the number of units): one request lookup.
  void append_slots(KvRequestId id, int64_t start, int64_t count, std::vector<std::vector<int64_t>>& out) const;
  KvBlockTable block_table(KvRequestId id, int unit) const;
  std::span<const uint32_t> layer_pages(int unit, uint32_t block) const;
  std::byte* pool_memory(int bucket) const { return memory_.at(static_cast<size_t>(bucket)); }
  // The pool of a bucket (its page lists, for mirrors of them) and a unit's index inside its pool.
  const BlockPool& pool(int bucket) const { return *pools_.at(static_cast<size_t>(bucket)); }
  int local_unit(int unit) const { return local_unit_.at(static_cast<size_t>(unit)); }
  // Address of group g's entry for `slot` in the unit's layer number `layer_index` (0-based within the
  // group's layers). Requires pool memory.
  std::byte* entry_address(int group, int layer_index, int64_t slot) const;

  KvCacheStats stats() const;
  // Full consistency check (tests): pools, and every reference count equals the number of request
  // tables holding the block. Throws dsv4::Error on the first mismatch.
  void check_consistency() const;

 private:
  struct Table {
    int64_t first_page = 0;
    size_t head = 0;  // blocks[head..] are live; the front is trimmed lazily
    std::vector<uint32_t> blocks;
    // Cached from the above so that most decode steps need no page arithmetic: positions below
    // covered_end have pages; nothing can be released before position release_at is reached.
    int64_t covered_end = 0;
    int64_t release_at = INT64_MAX;
    size_t size() const { return blocks.size() - head; }
  };
  struct Request {
    int64_t prompt_len = 0;
    int64_t tokens = 0;
    uint64_t seed = 0;
    uint64_t serial = 0;
    std::vector<uint64_t> hashes;
    std::vector<Table> tables;  // per unit
  };
  struct Need;

  Request& request(KvRequestId id);
  const Request& request(KvRequestId id) const;
  BlockPool& pool_of(int unit) { return *pools_[static_cast<size_t>(layout_.units[static_cast<size_t>(unit)].bucket)]; }
  const BlockPool& pool_of(int unit) const {
    return *pools_[static_cast<size_t>(layout_.units[static_cast<size_t>(unit)].bucket)];
  }
  uint64_t epoch() const;
  bool fits(const Request& r, int64_t n, const PrefixHit* hit) const;
  bool in_place(const Request& r, int64_t start, int64_t end) const;
  void check_hit(const Request& r, const PrefixHit& hit) const;
  void claim(Request& r, const PrefixHit& hit);
  void update_marks(Table& t, const KvUnit& u) const;
  int64_t slot_in(const Table& t, const KvUnit& u, int64_t position, KvRequestId id, int64_t allocated) const;
  void release_window(Request& r, int unit, int64_t start);
  void grow(Request& r, int unit, int64_t end);
  void register_blocks(Request& r, int64_t start, int64_t end, std::span<const int32_t> tokens);
  bool retained(const Request& r, int64_t boundary) const;
  static bool last_prompt_boundary(const Request& r, int64_t boundary);
  uint64_t key_of(const Request& r, int unit, int64_t page) const;
  int32_t find_page(const Request& r, int unit, int64_t page) const;
  bool on_host(const Request& r, int unit, int64_t page) const;
  template <typename Probe>
  int64_t resumable_blocks(int64_t max_blocks, Probe&& held) const;
  struct PrefixPage {
    int unit;
    int32_t block;  // on the device; kNone: on the host only
    uint64_t key;
  };
  void restore_prefix(Request& r, int64_t max_blocks);
  std::vector<PrefixPage> prefix_pages(const Request& r, int64_t m) const;
  bool pools_can_restore(std::span<const PrefixPage> pages) const;
  bool bring_back(std::vector<PrefixPage>& pages);
  void offload(size_t bucket, uint32_t block, uint64_t key, bool extra);
  void queue_copies(size_t bucket, std::span<const uint32_t> device_pages, std::span<const uint32_t> host_pages,
                    bool to_device);
  uint64_t flush_copies();
  void drain_restores();
  uint64_t restore_ticket(const PrefixHit& hit) const;
  bool window_cached(const Request& r, int unit, int64_t boundary, std::vector<uint32_t>* out) const;
  void check_fits_max_len() const;
  void make_host_tier();
  void commit_counters(const PrefixHit& hit);

  KvLayout layout_;
  KvCacheOptions options_;
  std::vector<std::unique_ptr<BlockPool>> pools_;
  std::vector<std::byte*> memory_;
  std::vector<int> local_unit_;  // index of each unit inside its pool
  std::unordered_map<KvRequestId, Request> requests_;
  std::vector<KvGroupStats> group_stats_;
  std::unique_ptr<KvHostTier> host_;  // null when off
  std::vector<KvPageCopy> pending_;   // copies of the current call, in order
  // Restores running in the background (oldest first): until their ticket lands the restored blocks
  // keep a reference of the manager's (so nothing evicts or reads them) and the host pages they read
  // stay out of the host pool (so no offload rewrites them).
  struct Restore {
    uint64_t ticket = 0;
    std::vector<std::pair<int, uint32_t>> blocks;                   // (unit, block), in page order
    std::vector<std::pair<int, std::vector<uint32_t>>> host_pages;  // (bucket, pages)
    std::chrono::steady_clock::time_point start;                    // when restore_prefix began
  };
  std::deque<Restore> restores_;
  int64_t host_hits_ = 0, host_restored_tokens_ = 0, offload_bytes_ = 0, restore_bytes_ = 0;
  std::vector<int64_t> unit_offloaded_, unit_restored_;  // host-tier blocks per unit
  Histogram restore_seconds_{kKvRestoreSecondsBuckets};
  int64_t lookups_ = 0, hits_ = 0, query_tokens_ = 0, hit_tokens_ = 0;
  uint64_t next_serial_ = 1;
};

}  // namespace dsv4
