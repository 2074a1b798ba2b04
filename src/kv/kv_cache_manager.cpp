#include "kv/kv_cache_manager.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <thread>
#include <tuple>

#include "core/error.h"
#include "kv/block_hash.h"

namespace dsv4 {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

KvCacheManager::KvCacheManager(KvLayout layout, std::vector<int64_t> pool_pages, KvCacheOptions options)
    : layout_(std::move(layout)), options_(options) {
  const int64_t r = options_.retention_interval;
  DSV4_CHECK(r == 0 || r == -1 || (r > 0 && r % kKvBlockTokens == 0),
             "KV cache: prefix cache retention interval must be 0, -1 or a positive multiple of {}, got {}",
             kKvBlockTokens, r);
  DSV4_CHECK(pool_pages.size() == layout_.buckets.size(), "KV cache: {} pool sizes given for {} buckets",
             pool_pages.size(), layout_.buckets.size());
  local_unit_.assign(layout_.units.size(), 0);
  for (size_t b = 0; b < layout_.buckets.size(); ++b) {
    const KvBucket& bucket = layout_.buckets[b];
    std::vector<int> layers;
    for (int u : bucket.units) {
      local_unit_[static_cast<size_t>(u)] = static_cast<int>(layers.size());
      layers.push_back(layout_.units[static_cast<size_t>(u)].num_layers());
    }
    pools_.push_back(std::make_unique<BlockPool>(bucket.page_bytes, pool_pages[b], std::move(layers)));
  }
  for (const auto& g : layout_.groups) group_stats_.push_back({.name = g.name});
  unit_offloaded_.assign(layout_.units.size(), 0);
  unit_restored_.assign(layout_.units.size(), 0);
  check_fits_max_len();
  if (options_.memory != nullptr) {
    for (size_t b = 0; b < pools_.size(); ++b) {
      memory_.push_back(options_.memory->allocate(static_cast<size_t>(pool_pages[b] * layout_.buckets[b].page_bytes)));
    }
  } else {
    memory_.assign(pools_.size(), nullptr);
  }
  DSV4_CHECK(options_.host_tier_bytes >= 0, "KV cache: host tier bytes must not be negative, got {}",
             options_.host_tier_bytes);
  if (options_.host_tier_bytes > 0 && options_.enable_prefix_caching) make_host_tier();
}

void KvCacheManager::make_host_tier() {
  const bool bytes = options_.memory != nullptr;
  DSV4_CHECK(!bytes || (options_.host_memory != nullptr && options_.copier != nullptr),
             "KV cache: a host tier over pool memory needs host memory and a page copier");
  std::vector<int64_t> page_bytes;
  for (const KvBucket& b : layout_.buckets) page_bytes.push_back(b.page_bytes);
  host_ = std::make_unique<KvHostTier>(std::move(page_bytes),
                                       host_tier_pages(layout_, options_.host_tier_bytes, options_.retention_interval),
                                       bytes ? options_.host_memory : nullptr);
  for (size_t b = 0; b < pools_.size(); ++b) {
    pools_[b]->set_evict_observer(
        [this, b](uint32_t block, uint64_t key, bool extra) { offload(b, block, key, extra); });
  }
}

// Split as stored prefixes spend bytes per 256 positions: a full unit one block (a page a layer); a
// sliding unit the window kept at each retained boundary, every block at retention -1, every N positions
// at N, about once a prompt at 0 (taken as once per kHostTierPromptTokens). The device pools' own split
// would not do: their sliding floor (a window per running sequence) is most of a small budget, and the
// buckets that take most of what is offloaded evicted while the tier as a whole stood 13% full.
std::vector<int64_t> host_tier_pages(const KvLayout& layout, int64_t bytes, int64_t retention_interval) {
  DSV4_CHECK(bytes >= 0, "KV host tier: {} bytes", bytes);
  const double per_block = retention_interval < 0    ? 1.0
                           : retention_interval == 0 ? double{kKvBlockTokens} / kHostTierPromptTokens
                                                     : double{kKvBlockTokens} / static_cast<double>(retention_interval);
  std::vector<double> weight(layout.buckets.size(), 0.0);
  double total = 0;
  for (const KvUnit& u : layout.units) {
    const auto [first, last] = u.resume_pages(int64_t{64} * kKvBlockTokens);  // a window well past the start
    const double pages = u.sliding() ? static_cast<double>(last - first + 1) * per_block : 1.0;
    const double w =
        pages * u.num_layers() * static_cast<double>(layout.buckets[static_cast<size_t>(u.bucket)].page_bytes);
    weight[static_cast<size_t>(u.bucket)] += w;
    total += w;
  }
  std::vector<int64_t> pages;
  for (size_t b = 0; b < layout.buckets.size(); ++b) {
    const double share = total > 0 ? weight[b] / total : 0;
    pages.push_back(static_cast<int64_t>(static_cast<double>(bytes) * share) / layout.buckets[b].page_bytes);
  }
  return pages;
}

KvCacheManager::~KvCacheManager() {
  drain_restores();  // no copy may still be writing the pools or reading the host tier
  if (options_.memory == nullptr) return;
  for (size_t b = 0; b < pools_.size(); ++b) {
    options_.memory->deallocate(memory_[b], static_cast<size_t>(pools_[b]->capacity_pages() * pools_[b]->page_bytes()));
  }
}

void KvCacheManager::check_fits_max_len() const {
  if (options_.max_model_len <= 0) return;
  std::string missing;
  for (size_t b = 0; b < pools_.size(); ++b) {
    int64_t need = 0;
    std::string names;
    for (int u : layout_.buckets[b].units) {
      const KvUnit& unit = layout_.units[static_cast<size_t>(u)];
      need += unit.pages_for(options_.max_model_len) * unit.num_layers();
      names += (names.empty() ? "" : ", ") + unit.name;
    }
    const BlockPool& p = *pools_[b];
    if (need > p.capacity_pages()) {
      missing +=
          fmt::format("; pool {} ({} B pages: {}) needs {} pages = {} B but has {} pages = {} B", b, p.page_bytes(),
                      names, need, need * p.page_bytes(), p.capacity_pages(), p.capacity_pages() * p.page_bytes());
    }
  }
  DSV4_CHECK(missing.empty(), "KV cache cannot hold one request of max_model_len = {} tokens{}", options_.max_model_len,
             missing);
}

KvCacheManager::Request& KvCacheManager::request(KvRequestId id) {
  const auto it = requests_.find(id);
  DSV4_CHECK(it != requests_.end(), "KV cache: unknown request {}", id);
  return it->second;
}

const KvCacheManager::Request& KvCacheManager::request(KvRequestId id) const {
  const auto it = requests_.find(id);
  DSV4_CHECK(it != requests_.end(), "KV cache: unknown request {}", id);
  return it->second;
}

void KvCacheManager::add_request(KvRequestId id, int64_t prompt_len, std::string_view cache_salt) {
  DSV4_CHECK(prompt_len >= 0, "KV cache: request {} has a negative prompt length {}", id, prompt_len);
  DSV4_CHECK(!requests_.count(id), "KV cache: request {} is already registered", id);
  Request& r = requests_[id];
  r.prompt_len = prompt_len;
  r.seed = prefix_hash_seed(cache_salt);
  r.serial = next_serial_++;
  r.tables.resize(layout_.units.size());
}

int64_t KvCacheManager::num_tokens(KvRequestId id) const { return request(id).tokens; }

uint64_t KvCacheManager::request_serial(KvRequestId id) const { return request(id).serial; }

uint64_t KvCacheManager::epoch() const {
  uint64_t e = 0;
  for (const auto& p : pools_) e += p->evictions();
  return e;
}

uint64_t KvCacheManager::key_of(const Request& r, int unit, int64_t page) const {
  const KvUnit& u = layout_.units[static_cast<size_t>(unit)];
  const int64_t block = u.page_begin(page) / kKvBlockTokens;
  return page_key(r.hashes[static_cast<size_t>(block)], unit, page - u.page_of(block * kKvBlockTokens));
}

int32_t KvCacheManager::find_page(const Request& r, int unit, int64_t page) const {
  return pool_of(unit).find(key_of(r, unit, page));
}

bool KvCacheManager::on_host(const Request& r, int unit, int64_t page) const {
  return host_->find(layout_.units[static_cast<size_t>(unit)].bucket, key_of(r, unit, page)) != nullptr;
}

// Blocks of the longest prefix from which every unit can resume when `held(unit, page)` says which pages
// are kept: full units every block below it, sliding units their window at it.
template <typename Probe>
int64_t KvCacheManager::resumable_blocks(int64_t max_blocks, Probe&& held) const {
  const int n_units = static_cast<int>(layout_.units.size());
  int64_t n_full = max_blocks;
  for (int64_t j = 0; j < n_full; ++j) {
    for (int u = 0; u < n_units && j < n_full; ++u) {
      if (!layout_.units[static_cast<size_t>(u)].sliding() && !held(u, j)) n_full = j;
    }
  }
  for (int64_t m = n_full; m > 0; --m) {
    bool all = true;
    for (int u = 0; u < n_units && all; ++u) {
      const KvUnit& unit = layout_.units[static_cast<size_t>(u)];
      if (!unit.sliding()) continue;
      const auto [first, last] = unit.resume_pages(m * kKvBlockTokens);
      for (int64_t q = first; q <= last && all; ++q) all = held(u, q);
    }
    if (all) return m;
  }
  return 0;
}

// Brings back from the host tier the blocks of the longest prefix the two tiers hold together, all or
// nothing: when the pools cannot take them without evicting the prefix itself, nothing moves. The copies
// have finished when it returns, so a lookup never sees a block half restored.
void KvCacheManager::restore_prefix(Request& r, int64_t max_blocks) {
  const auto on_device = [&](int u, int64_t q) { return find_page(r, u, q) != BlockPool::kNone; };
  const int64_t device_m = resumable_blocks(max_blocks, on_device);
  const int64_t m = resumable_blocks(max_blocks, [&](int u, int64_t q) { return on_device(u, q) || on_host(r, u, q); });
  if (m <= device_m) return;
  std::vector<PrefixPage> pages = prefix_pages(r, m);
  if (!pools_can_restore(pages)) return;
  const auto t0 = std::chrono::steady_clock::now();
  if (bring_back(pages)) {
    restores_.back().start = t0;  // timed when it lands (poll_restores)
  } else {
    restore_seconds_.observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  ++host_hits_;
  host_restored_tokens_ += (m - device_m) * kKvBlockTokens;
}

// Every page a request resuming at block m reads: full units' blocks below m, sliding units' window at m.
std::vector<KvCacheManager::PrefixPage> KvCacheManager::prefix_pages(const Request& r, int64_t m) const {
  std::vector<PrefixPage> pages;
  const int64_t boundary = m * kKvBlockTokens;
  for (int u = 0; u < static_cast<int>(layout_.units.size()); ++u) {
    const KvUnit& unit = layout_.units[static_cast<size_t>(u)];
    const auto [first, last] = unit.sliding() ? unit.resume_pages(boundary) : std::pair<int64_t, int64_t>{0, m - 1};
    for (int64_t q = first; q <= last; ++q) pages.push_back({u, find_page(r, u, q), key_of(r, u, q)});
  }
  return pages;
}

// Whether the pools can take the host pages without evicting the device pages of the same prefix.
bool KvCacheManager::pools_can_restore(std::span<const PrefixPage> pages) const {
  std::array<int64_t, kMaxKvBuckets> need{}, pinned{};
  for (const PrefixPage& p : pages) {
    const KvUnit& unit = layout_.units[static_cast<size_t>(p.unit)];
    const auto b = static_cast<size_t>(unit.bucket);
    if (p.block == BlockPool::kNone) {
      need[b] += unit.num_layers();
    } else if (pool_of(p.unit).cached(static_cast<uint32_t>(p.block))) {
      pinned[b] += unit.num_layers();
    }
  }
  for (size_t b = 0; b < pools_.size(); ++b) {
    if (need[b] > pools_[b]->free_pages() + pools_[b]->cached_pages() - pinned[b]) return false;
  }
  return true;
}

// Pins what the device holds, takes the host's entries out of its LRU, then allocates (the evictions this
// makes, offloaded in turn, can touch neither), copies and leaves every page cached on the device; true
// when the copies run in the background (a Restore entry holds the pages until they land).
bool KvCacheManager::bring_back(std::vector<PrefixPage>& pages) {
  std::vector<std::pair<int, KvHostEntry>> taken;  // (bucket, entry)
  for (const PrefixPage& p : pages) {
    const int bucket = layout_.units[static_cast<size_t>(p.unit)].bucket;
    if (p.block != BlockPool::kNone) pool_of(p.unit).retain(static_cast<uint32_t>(p.block));
    if (p.block == BlockPool::kNone) taken.emplace_back(bucket, host_->take(bucket, p.key));
  }
  size_t t = 0;
  std::vector<bool> restored(pages.size(), false);
  for (size_t i = 0; i < pages.size(); ++i) {
    PrefixPage& p = pages[i];
    if (p.block != BlockPool::kNone) continue;
    restored[i] = true;
    const auto& [bucket, e] = taken[t++];
    BlockPool& pool = pool_of(p.unit);
    const uint32_t block = pool.allocate(local_unit_[static_cast<size_t>(p.unit)]);
    pool.set_key(block, e.key, e.extra);
    ++unit_restored_[static_cast<size_t>(p.unit)];
    queue_copies(static_cast<size_t>(bucket), pool.layer_pages(block), e.pages, true);
    p.block = static_cast<int32_t>(block);
  }
  const uint64_t ticket = flush_copies();
  if (ticket == 0) {
    for (const auto& [bucket, e] : taken) host_->release(bucket, e.pages);
    for (auto it = pages.rbegin(); it != pages.rend(); ++it)
      pool_of(it->unit).release(static_cast<uint32_t>(it->block));
    return false;
  }
  // In the background: the restored blocks stay held and their host pages taken until the ticket lands
  // (poll_restores); the pages the device already held are let go now.
  Restore r{ticket, {}, {}, {}};
  for (auto& [bucket, e] : taken) r.host_pages.emplace_back(bucket, std::move(e.pages));
  for (size_t i = pages.size(); i-- > 0;) {
    if (!restored[i]) pool_of(pages[i].unit).release(static_cast<uint32_t>(pages[i].block));
  }
  for (size_t i = 0; i < pages.size(); ++i) {
    if (restored[i]) r.blocks.emplace_back(pages[i].unit, static_cast<uint32_t>(pages[i].block));
  }
  restores_.push_back(std::move(r));
  return true;
}

// Lets go of the restores that have landed, oldest first (tickets land in order).
void KvCacheManager::poll_restores() {
  while (!restores_.empty() && options_.copier->landed(restores_.front().ticket)) {
    Restore& r = restores_.front();
    for (const auto& [bucket, pages] : r.host_pages) host_->release(bucket, pages);
    for (auto it = r.blocks.rbegin(); it != r.blocks.rend(); ++it) pool_of(it->first).release(it->second);
    restore_seconds_.observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - r.start).count());
    restores_.pop_front();
  }
}

void KvCacheManager::drain_restores() {
  while (!restores_.empty()) {
    poll_restores();
    if (!restores_.empty()) std::this_thread::yield();
  }
}

// The newest restore in flight that brought back a page of the hit (0: none).
uint64_t KvCacheManager::restore_ticket(const PrefixHit& hit) const {
  for (auto r = restores_.rbegin(); r != restores_.rend(); ++r) {
    for (const auto& [unit, block] : r->blocks) {
      const auto& held = hit.blocks[static_cast<size_t>(unit)];
      if (std::find(held.begin(), held.end(), block) != held.end()) return r->ticket;
    }
  }
  return 0;
}

bool KvCacheManager::restored(const PrefixHit& hit) const {
  return hit.ticket == 0 || options_.copier->landed(hit.ticket);
}

// The pool is about to reuse a keyed block's pages: its bytes go to the host tier first.
void KvCacheManager::offload(size_t bucket, uint32_t block, uint64_t key, bool extra) {
  const BlockPool& pool = *pools_[bucket];
  const std::span<const uint32_t> pages = pool.layer_pages(block);
  const std::span<const uint32_t> host_pages =
      host_->store(static_cast<int>(bucket), key, pool.local_unit(block), static_cast<int>(pages.size()), extra);
  if (host_pages.empty()) return;
  queue_copies(bucket, pages, host_pages, false);
  ++unit_offloaded_[static_cast<size_t>(layout_.buckets[bucket].units[static_cast<size_t>(pool.local_unit(block))])];
}

void KvCacheManager::queue_copies(size_t bucket, std::span<const uint32_t> device_pages,
                                  std::span<const uint32_t> host_pages, bool to_device) {
  const int64_t bytes = layout_.buckets[bucket].page_bytes;
  (to_device ? restore_bytes_ : offload_bytes_) += bytes * static_cast<int64_t>(device_pages.size());
  if (memory_[bucket] == nullptr) return;  // bookkeeping only
  for (size_t i = 0; i < device_pages.size(); ++i) {
    std::byte* dev = memory_[bucket] + int64_t{device_pages[i]} * bytes;
    std::byte* host = host_->page_address(static_cast<int>(bucket), host_pages[i]);
    pending_.push_back(to_device ? KvPageCopy{dev, host, bytes, true} : KvPageCopy{host, dev, bytes, false});
  }
}

uint64_t KvCacheManager::flush_copies() {
  if (pending_.empty()) return 0;
  coalesce(pending_);
  const uint64_t ticket = options_.copier->copy(pending_);
  pending_.clear();
  return ticket;
}

// Whether the unit's rows needed to resume at `boundary` are all cached; collects their blocks.
bool KvCacheManager::window_cached(const Request& r, int unit, int64_t boundary, std::vector<uint32_t>* out) const {
  const auto [first, last] = layout_.units[static_cast<size_t>(unit)].resume_pages(boundary);
  if (first > last) return true;
  if (find_page(r, unit, last) == BlockPool::kNone) return false;  // cheap rejection first
  for (int64_t q = first; q <= last; ++q) {
    const int32_t b = find_page(r, unit, q);
    if (b == BlockPool::kNone) return false;
    if (out != nullptr) out->push_back(static_cast<uint32_t>(b));
  }
  return true;
}

PrefixHit KvCacheManager::empty_prefix(KvRequestId id) {
  request(id);  // a known request
  PrefixHit hit;
  hit.group_tokens.assign(layout_.groups.size(), 0);
  hit.epoch = epoch();
  hit.blocks.resize(layout_.units.size());
  hit.first_page.assign(layout_.units.size(), 0);
  return hit;
}

PrefixHit KvCacheManager::lookup_prefix(KvRequestId id, std::span<const int32_t> tokens) {
  Request& r = request(id);
  const auto n_units = layout_.units.size();
  PrefixHit hit = empty_prefix(id);
  hit.query_tokens = static_cast<int64_t>(tokens.size());
  if (!options_.enable_prefix_caching || tokens.size() < 2) return hit;
  const int64_t max_blocks = (hit.query_tokens - 1) / kKvBlockTokens;
  extend_block_hashes(r.hashes, tokens, r.seed, static_cast<size_t>(max_blocks));
  if (host_ != nullptr) {
    poll_restores();
    restore_prefix(r, max_blocks);
    hit.epoch = epoch();  // restoring may have evicted other blocks
  }
  // Full units: every block from the start.
  int64_t n_full = max_blocks;
  for (int64_t j = 0; j < n_full; ++j) {
    for (size_t u = 0; u < n_units && j < n_full; ++u) {
      if (layout_.units[u].sliding()) continue;
      const int32_t b = find_page(r, static_cast<int>(u), j);
      if (b == BlockPool::kNone) {
        n_full = j;
      } else {
        hit.blocks[u].push_back(static_cast<uint32_t>(b));
      }
    }
  }
  // Sliding units: the window at the resume point, highest point first.
  std::vector<int64_t> unit_best(n_units, 0);
  int64_t common = -1;
  for (int64_t m = n_full; m > 0 && common < 0; --m) {
    bool all = true;
    for (size_t u = 0; u < n_units; ++u) {
      if (!layout_.units[u].sliding()) continue;
      const bool ok = window_cached(r, static_cast<int>(u), m * kKvBlockTokens, nullptr);
      if (ok && unit_best[u] == 0) unit_best[u] = m;
      all = all && ok;
    }
    if (all) common = m;
  }
  common = std::max<int64_t>(common, 0);
  hit.tokens = common * kKvBlockTokens;
  for (size_t u = 0; u < n_units; ++u) {
    const KvUnit& unit = layout_.units[u];
    if (!unit.sliding()) {
      hit.blocks[u].resize(static_cast<size_t>(common));
      unit_best[u] = n_full;
    } else {
      hit.blocks[u].clear();
      if (common > 0) window_cached(r, static_cast<int>(u), hit.tokens, &hit.blocks[u]);
      hit.first_page[u] = unit.page_of(std::min(unit.first_needed(hit.tokens), hit.tokens));
    }
    for (int g : unit.groups) hit.group_tokens[static_cast<size_t>(g)] = unit_best[u] * kKvBlockTokens;
  }
  if (!restores_.empty()) hit.ticket = restore_ticket(hit);
  return hit;
}

bool KvCacheManager::fits(const Request& r, int64_t n, const PrefixHit* hit) const {
  DSV4_CHECK(n >= 0, "KV cache: cannot allocate {} positions", n);
  if (hit != nullptr) check_hit(r, *hit);
  const int64_t start = hit != nullptr ? hit->tokens : r.tokens;
  const int64_t end = start + n;
  std::array<int64_t, kMaxKvBuckets> need{}, freed{};
  bool any = false;
  for (size_t ui = 0; ui < layout_.units.size(); ++ui) {
    const KvUnit& u = layout_.units[ui];
    const auto b = static_cast<size_t>(u.bucket);
    const int64_t layers = u.num_layers();
    int64_t first = 0, count = 0;
    if (hit != nullptr) {
      for (uint32_t blk : hit->blocks[ui]) freed[b] -= pools_[b]->cached(blk) ? layers : 0;  // no longer evictable
      first = hit->first_page[ui];
      count = static_cast<int64_t>(hit->blocks[ui].size());
    } else {
      const Table& t = r.tables[ui];
      if (start < t.release_at && end <= t.covered_end) continue;  // nothing to release or add
      first = t.first_page;
      count = static_cast<int64_t>(t.size());
      for (size_t i = t.head; u.sliding() && i < t.blocks.size(); ++i, ++first, --count) {
        if (u.page_end(first) > u.first_needed(start)) break;
        freed[b] += pools_[b]->refcount(t.blocks[i]) == 1 ? layers : 0;  // becomes free or evictable
      }
    }
    if (n == 0) continue;
    const int64_t want = u.sliding() ? u.page_of(end - 1) + 1 : ceil_div(end, kKvBlockTokens);
    const int64_t add = std::max<int64_t>(0, want - first - count) * layers;
    need[b] += add;
    any = any || add > 0;
  }
  if (!any) return true;  // most decode steps: every new position lands in a page the request holds
  for (size_t b = 0; b < pools_.size(); ++b) {
    if (need[b] > pools_[b]->free_pages() + pools_[b]->cached_pages() + freed[b]) return false;
  }
  return true;
}

// Whether positions [start, end) land in pages the request holds, release nothing and complete no block.
bool KvCacheManager::in_place(const Request& r, int64_t start, int64_t end) const {
  if (end / kKvBlockTokens != start / kKvBlockTokens) return false;
  for (const Table& t : r.tables) {
    if (start >= t.release_at || end > t.covered_end) return false;
  }
  return true;
}

bool KvCacheManager::can_allocate(KvRequestId id, int64_t num_new_tokens, const PrefixHit* hit) const {
  return fits(request(id), num_new_tokens, hit);
}

void KvCacheManager::check_hit(const Request& r, const PrefixHit& hit) const {
  DSV4_CHECK(r.tokens == 0, "KV cache: a prefix hit can only start a request (it holds {} positions)", r.tokens);
  DSV4_CHECK(hit.epoch == epoch(), "KV cache: stale prefix hit (blocks were evicted after lookup_prefix)");
  DSV4_CHECK(hit.blocks.size() == layout_.units.size() && hit.first_page.size() == layout_.units.size(),
             "KV cache: the prefix hit belongs to another layout");
}

void KvCacheManager::claim(Request& r, const PrefixHit& hit) {
  for (size_t u = 0; u < layout_.units.size(); ++u) {
    for (uint32_t b : hit.blocks[u]) pool_of(static_cast<int>(u)).retain(b);
    Table& t = r.tables[u];
    t.first_page = hit.first_page[u];
    t.head = 0;
    t.blocks = hit.blocks[u];
    update_marks(t, layout_.units[u]);
  }
  r.tokens = hit.tokens;
  commit_counters(hit);
}

void KvCacheManager::commit_counters(const PrefixHit& hit) {
  if (hit.query_tokens == 0) return;  // empty_prefix: no lookup
  ++lookups_;
  hits_ += hit.tokens > 0;
  query_tokens_ += hit.query_tokens;
  hit_tokens_ += hit.tokens;
  for (size_t g = 0; g < group_stats_.size(); ++g) {
    auto& s = group_stats_[g];
    const int64_t tokens = g < hit.group_tokens.size() ? hit.group_tokens[g] : 0;
    ++s.lookups;
    s.hits += tokens > 0;
    s.query_tokens += hit.query_tokens;
    s.hit_tokens += tokens;
  }
}

void KvCacheManager::update_marks(Table& t, const KvUnit& u) const {
  const int64_t next = t.first_page + static_cast<int64_t>(t.size());
  t.covered_end = u.page_begin(next);
  t.release_at = t.size() > 0 ? u.release_position(u.page_end(t.first_page)) : INT64_MAX;
}

void KvCacheManager::release_window(Request& r, int unit, int64_t start) {
  const KvUnit& u = layout_.units[static_cast<size_t>(unit)];
  Table& t = r.tables[static_cast<size_t>(unit)];
  if (start < t.release_at) return;
  BlockPool& pool = pool_of(unit);
  while (t.size() > 0 && u.page_end(t.first_page) <= u.first_needed(start)) {
    pool.release(t.blocks[t.head++]);
    ++t.first_page;
  }
  if (t.head >= 64 && 2 * t.head >= t.blocks.size()) {
    t.blocks.erase(t.blocks.begin(), t.blocks.begin() + static_cast<std::ptrdiff_t>(t.head));
    t.head = 0;
  }
  update_marks(t, u);
}

void KvCacheManager::grow(Request& r, int unit, int64_t end) {
  const KvUnit& u = layout_.units[static_cast<size_t>(unit)];
  Table& t = r.tables[static_cast<size_t>(unit)];
  if (end <= t.covered_end) return;
  BlockPool& pool = pool_of(unit);
  const int local = local_unit_[static_cast<size_t>(unit)];
  const int64_t want = u.sliding() ? u.page_of(end - 1) + 1 : ceil_div(end, kKvBlockTokens);
  while (t.first_page + static_cast<int64_t>(t.size()) < want) t.blocks.push_back(pool.allocate(local));
  update_marks(t, u);
}

bool KvCacheManager::retained(const Request& r, int64_t boundary) const {
  const int64_t interval = options_.retention_interval;
  if (interval == -1) return true;
  if (interval > 0 && boundary % interval == 0) return true;
  return last_prompt_boundary(r, boundary);
}

// The one window interval 0 keeps: where the next turn of a conversation resumes. Others are `extra`.
bool KvCacheManager::last_prompt_boundary(const Request& r, int64_t boundary) {
  return r.prompt_len > 0 && boundary == (r.prompt_len - 1) / kKvBlockTokens * kKvBlockTokens;
}

// Names the blocks that became complete in [start, end) and the windows of retained checkpoints.
void KvCacheManager::register_blocks(Request& r, int64_t start, int64_t end, std::span<const int32_t> tokens) {
  const int64_t done = end / kKvBlockTokens;
  if (!options_.enable_prefix_caching || done == start / kKvBlockTokens) return;  // no boundary crossed
  extend_block_hashes(r.hashes, tokens, r.seed, static_cast<size_t>(done));
  for (size_t ui = 0; ui < layout_.units.size(); ++ui) {
    const KvUnit& u = layout_.units[ui];
    const Table& t = r.tables[ui];
    BlockPool& pool = pool_of(static_cast<int>(ui));
    for (int64_t m = start / kKvBlockTokens + 1; m <= done; ++m) {
      const int64_t boundary = m * kKvBlockTokens;
      int64_t first = 0, last = m - 1;  // full units: block m-1 just completed
      const bool extra = u.sliding() && !last_prompt_boundary(r, boundary);
      if (u.sliding()) {
        if (!retained(r, boundary)) continue;
        std::tie(first, last) = u.resume_pages(boundary);
        if (first > last) continue;
      } else {
        first = last;
      }
      for (int64_t q = std::max(first, t.first_page); q <= last; ++q) {
        const int64_t block = u.page_begin(q) / kKvBlockTokens;
        const uint64_t key =
            page_key(r.hashes[static_cast<size_t>(block)], static_cast<int>(ui), q - u.page_of(block * kKvBlockTokens));
        pool.set_key(t.blocks[t.head + static_cast<size_t>(q - t.first_page)], key, extra);
      }
    }
  }
}

bool KvCacheManager::allocate(KvRequestId id, int64_t num_new_tokens, std::span<const int32_t> tokens,
                              const PrefixHit* hit) {
  Request& r = request(id);
  const int64_t start = hit != nullptr ? hit->tokens : r.tokens;
  const int64_t end = start + num_new_tokens;
  DSV4_CHECK(num_new_tokens < 0 || !options_.enable_prefix_caching || static_cast<int64_t>(tokens.size()) >= end,
             "KV cache: request {} allocates up to position {} but only {} token ids were given", id, end,
             tokens.size());
  if (hit == nullptr && num_new_tokens > 0 && in_place(r, start, end)) {
    r.tokens = end;  // most decode steps: nothing to release, allocate or name
    return true;
  }
  if (!fits(r, num_new_tokens, hit)) return false;
  if (hit != nullptr) claim(r, *hit);
  if (num_new_tokens == 0) return true;
  for (size_t u = 0; u < layout_.units.size(); ++u) {
    if (layout_.units[u].sliding()) release_window(r, static_cast<int>(u), start);
  }
  for (size_t u = 0; u < layout_.units.size(); ++u) grow(r, static_cast<int>(u), end);
  register_blocks(r, start, end, tokens);
  flush_copies();  // offloads of the blocks grow() evicted, before the step writes their pages
  r.tokens = end;
  return true;
}

void KvCacheManager::free(KvRequestId id) {
  Request& r = request(id);
  for (size_t u = 0; u < layout_.units.size(); ++u) {
    Table& t = r.tables[u];
    BlockPool& pool = pool_of(static_cast<int>(u));
    // Last block first: the start of a prefix is released last, so it is evicted last.
    for (size_t i = t.blocks.size(); i-- > t.head;) pool.release(t.blocks[i]);
  }
  requests_.erase(id);
}

int64_t KvCacheManager::slot_in(const Table& t, const KvUnit& u, int64_t position, KvRequestId id,
                                int64_t allocated) const {
  const int64_t q = position >= 0 ? u.page_of(position) : -1;
  DSV4_CHECK(
      position >= 0 && position < allocated && q >= t.first_page && q < t.first_page + static_cast<int64_t>(t.size()),
      "KV cache: position {} of request {} has no live page in unit {} ({} positions allocated)", position, id, u.name,
      allocated);
  const int64_t e = u.entry_in_page(position);
  if (e < 0) return -1;
  return int64_t{t.blocks[t.head + static_cast<size_t>(q - t.first_page)]} * u.entries_per_page + e;
}

int64_t KvCacheManager::slot(KvRequestId id, int unit, int64_t position) const {
  const Request& r = request(id);
  DSV4_CHECK(unit >= 0 && unit < static_cast<int>(layout_.units.size()), "KV cache: no unit {}", unit);
  return slot_in(r.tables[static_cast<size_t>(unit)], layout_.units[static_cast<size_t>(unit)], position, id, r.tokens);
}

void KvCacheManager::append_slots(KvRequestId id, int unit, int64_t start, int64_t count,
                                  std::vector<int64_t>& out) const {
  const Request& r = request(id);
  DSV4_CHECK(unit >= 0 && unit < static_cast<int>(layout_.units.size()), "KV cache: no unit {}", unit);
  const Table& t = r.tables[static_cast<size_t>(unit)];
  const KvUnit& u = layout_.units[static_cast<size_t>(unit)];
  for (int64_t p = start; p < start + count; ++p) out.push_back(slot_in(t, u, p, id, r.tokens));
}

void KvCacheManager::append_slots(KvRequestId id, int64_t start, int64_t count,
                                  std::vector<std::vector<int64_t>>& out) const {
  const Request& r = request(id);
  out.resize(layout_.units.size());
  for (size_t u = 0; u < layout_.units.size(); ++u) {
    for (int64_t p = start; p < start + count; ++p) {
      out[u].push_back(slot_in(r.tables[u], layout_.units[u], p, id, r.tokens));
    }
  }
}

KvBlockTable KvCacheManager::block_table(KvRequestId id, int unit) const {
  const Request& r = request(id);
  DSV4_CHECK(unit >= 0 && unit < static_cast<int>(layout_.units.size()), "KV cache: no unit {}", unit);
  const Table& t = r.tables[static_cast<size_t>(unit)];
  return {t.first_page, std::span<const uint32_t>(t.blocks).subspan(t.head)};
}

std::span<const uint32_t> KvCacheManager::layer_pages(int unit, uint32_t block) const {
  const BlockPool& pool = pool_of(unit);
  DSV4_CHECK(block < pool.num_blocks() && pool.local_unit(block) == local_unit_[static_cast<size_t>(unit)],
             "KV cache: block {} does not belong to unit {}", block, unit);
  return pool.layer_pages(block);
}

std::byte* KvCacheManager::entry_address(int group, int layer_index, int64_t slot_index) const {
  DSV4_CHECK(group >= 0 && group < static_cast<int>(layout_.groups.size()), "KV cache: no group {}", group);
  const int unit = layout_.unit_of_group[static_cast<size_t>(group)];
  const KvUnit& u = layout_.units[static_cast<size_t>(unit)];
  DSV4_CHECK(layer_index >= 0 && layer_index < u.num_layers(), "KV cache: group {} has no layer index {}",
             layout_.groups[static_cast<size_t>(group)].name, layer_index);
  std::byte* base = memory_[static_cast<size_t>(u.bucket)];
  DSV4_CHECK(base != nullptr, "KV cache: the pools have no memory");
  const auto block = static_cast<uint32_t>(slot_index / u.entries_per_page);
  const int64_t page = layer_pages(unit, block)[static_cast<size_t>(layer_index)];
  const int member = layout_.member_of_group[static_cast<size_t>(group)];
  return base + page * layout_.buckets[static_cast<size_t>(u.bucket)].page_bytes +
         u.member_offsets[static_cast<size_t>(member)] +
         slot_index % u.entries_per_page * layout_.groups[static_cast<size_t>(group)].entry_bytes;
}

std::vector<std::pair<std::byte*, size_t>> KvCacheManager::host_tier_regions() const {
  return host_ ? host_->regions() : std::vector<std::pair<std::byte*, size_t>>{};
}

void KvCacheManager::set_copier(KvPageCopier* copier) {
  DSV4_CHECK(copier != nullptr || !host_, "KV cache: the host tier needs a page copier");
  drain_restores();  // tickets belong to the copier that issued them
  options_.copier = copier;
}

KvCacheStats KvCacheManager::stats() const {
  KvCacheStats s;
  for (const auto& p : pools_) {
    s.pools.push_back(
        {p->page_bytes(), p->capacity_pages(), p->free_pages(), p->used_pages(), p->cached_pages(), p->evictions()});
  }
  s.groups = group_stats_;
  for (size_t g = 0; g < s.groups.size(); ++g) {
    const int u = layout_.unit_of_group[g];
    const KvUnit& unit = layout_.units[static_cast<size_t>(u)];
    KvGroupStats& gs = s.groups[g];
    gs.cached_blocks = pool_of(u).cached_blocks(local_unit_[static_cast<size_t>(u)]);
    // The group's bytes of a block: its entries in each of the unit's layer pages.
    const int64_t block_bytes = unit.num_layers() * unit.entries_per_page * layout_.groups[g].entry_bytes;
    gs.host_offloaded_blocks = unit_offloaded_[static_cast<size_t>(u)];
    gs.host_restored_blocks = unit_restored_[static_cast<size_t>(u)];
    gs.host_offload_bytes = gs.host_offloaded_blocks * block_bytes;
    gs.host_restore_bytes = gs.host_restored_blocks * block_bytes;
  }
  s.lookups = lookups_;
  s.hits = hits_;
  s.query_tokens = query_tokens_;
  s.hit_tokens = hit_tokens_;
  s.running_requests = static_cast<int64_t>(requests_.size());
  if (host_ != nullptr) s.host_pools = host_->stats();
  s.host_hits = host_hits_;
  s.host_restored_tokens = host_restored_tokens_;
  s.offload_bytes = offload_bytes_;
  s.restore_bytes = restore_bytes_;
  s.restore_seconds = restore_seconds_;
  s.restore_copy_seconds = options_.copier ? options_.copier->restore_copy_seconds() : 0;
  return s;
}

void KvCacheManager::check_consistency() const {
  for (const auto& p : pools_) p->check();
  if (host_ != nullptr) host_->check();
  DSV4_CHECK(pending_.empty(), "KV cache: {} page copies were never issued", pending_.size());
  std::vector<std::vector<uint32_t>> refs(pools_.size());
  for (size_t b = 0; b < pools_.size(); ++b) refs[b].assign(pools_[b]->num_blocks(), 0);
  for (const auto& [id, r] : requests_) {
    for (size_t u = 0; u < layout_.units.size(); ++u) {
      const auto b = static_cast<size_t>(layout_.units[u].bucket);
      const Table& t = r.tables[u];
      const int64_t want = layout_.units[u].sliding()
                               ? (r.tokens > 0 ? layout_.units[u].page_of(r.tokens - 1) + 1 : t.first_page)
                               : ceil_div(r.tokens, kKvBlockTokens);
      DSV4_CHECK(t.first_page + static_cast<int64_t>(t.size()) == want,
                 "KV cache: request {} unit {} covers pages up to {}, expected {}", id, layout_.units[u].name,
                 t.first_page + static_cast<int64_t>(t.size()), want);
      for (size_t i = t.head; i < t.blocks.size(); ++i) {
        const uint32_t blk = t.blocks[i];
        DSV4_CHECK(blk < pools_[b]->num_blocks() && pools_[b]->local_unit(blk) == local_unit_[u],
                   "KV cache: request {} holds block {} of another unit", id, blk);
        ++refs[b][blk];
      }
    }
  }
  for (const Restore& r : restores_) {
    for (const auto& [unit, blk] : r.blocks)
      ++refs[static_cast<size_t>(layout_.units[static_cast<size_t>(unit)].bucket)][blk];
  }
  for (size_t b = 0; b < pools_.size(); ++b) {
    for (uint32_t blk = 0; blk < pools_[b]->num_blocks(); ++blk) {
      const uint32_t counted = refs[b][blk];
      DSV4_CHECK(pools_[b]->refcount(blk) == counted,
                 "KV cache: pool {} block {} has reference count {}, {} tables and restores hold it", b, blk,
                 pools_[b]->refcount(blk), counted);
    }
  }
}

}  // namespace dsv4
