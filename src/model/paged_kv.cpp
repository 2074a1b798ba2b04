#include "model/paged_kv.h"

#include <algorithm>

#include "core/error.h"
#include "kv/kv_pool_sizing.h"
#include "model/device_kv_memory.h"

namespace dsv4 {
namespace {

const char* group_name(KvKind kind, int ratio) {
  switch (kind) {
    case KvKind::kWindow:
      return "swa";
    case KvKind::kCompressorState:
      return ratio == 4 ? "c4.state" : "c128.state";
    case KvKind::kIndexerState:
      return "c4.index.state";
    case KvKind::kCompressed:
      return ratio == 4 ? "c4.kv" : "c128.kv";
    case KvKind::kIndexerKey:
      return "c4.index";
  }
  return "";
}

}  // namespace

KvFormats kv_formats(KvDTypes d) {
  KvFormats f;
  f.attention = d.cache == KvCacheDType::kBf16 ? KvEntryFormat::kBf16 : KvEntryFormat::kAttnFp8;
  f.indexer = d.indexer == IndexerDType::kFp4   ? KvEntryFormat::kIndexFp4
              : d.indexer == IndexerDType::kFp8 ? KvEntryFormat::kIndexFp8
                                                : KvEntryFormat::kBf16;
  return f;
}

std::vector<size_t> pool_bytes(const KvCacheManager& manager) {
  std::vector<size_t> out;
  const KvCacheStats stats = manager.stats();
  for (size_t b = 0; b < stats.pools.size(); ++b)
    out.push_back(static_cast<size_t>(stats.pools[b].capacity_pages * manager.layout().buckets[b].page_bytes));
  return out;
}

PagedKv::PagedKv(const ModelConfig& cfg, const KvCacheManager& manager, KvFormats formats)
    : PagedKv(cfg, manager, formats, {}) {}

PagedKv::PagedKv(const ModelConfig& cfg, const KvCacheManager& manager, KvFormats formats,
                 std::vector<std::byte*> pools)
    : mgr_(manager) {
  const KvLayout& lay = manager.layout();
  const KvCacheStats stats = manager.stats();
  where_.resize(static_cast<size_t>(cfg.n_layers));
  for (int l = 0; l < cfg.n_layers; ++l) {
    const int ratio = cfg.compress_ratio(l);
    auto& row = where_[static_cast<size_t>(l)];
    row.resize(5);
    for (int k = 0; k < 5; ++k) {
      const auto kind = static_cast<KvKind>(k);
      if (!kv_kind_applies(kind, ratio)) continue;
      Where& w = row[static_cast<size_t>(k)];
      w.group = lay.find_group(group_name(kind, ratio));
      DSV4_CHECK(w.group >= 0, "paged kv: the layout has no group {}", group_name(kind, ratio));
      w.unit = lay.unit_of_group[static_cast<size_t>(w.group)];
      const KvUnit& u = lay.units[static_cast<size_t>(w.unit)];
      const auto it = std::find(u.layers.begin(), u.layers.end(), l);
      DSV4_CHECK(it != u.layers.end(), "paged kv: layer {} is not in unit {}", l, u.name);
      w.layer_index = static_cast<int>(it - u.layers.begin());
      w.ratio = std::max(1, lay.groups[static_cast<size_t>(w.group)].ratio);
      // Items map to pages contiguously (item i: page i / epp, entry i mod epp) in full units (entries
      // per 256-block) and in sliding units whose pages tile their period; others go item by item.
      w.per_entry = kind == KvKind::kCompressed || kind == KvKind::kIndexerKey;
      w.tiled = u.sliding() ? !w.per_entry && u.period % u.positions_per_page == 0
                            : w.per_entry && u.entries_per_page * w.ratio == kKvBlockTokens;
      const KvEntryFormat f = kind == KvKind::kWindow || kind == KvKind::kCompressed ? formats.attention
                              : kind == KvKind::kIndexerKey                          ? formats.indexer
                                                                                     : KvEntryFormat::kF32;
      const KvEntryDims dims = kv_entry_dims(cfg, ratio, kind);
      const int64_t bytes = lay.groups[static_cast<size_t>(w.group)].entry_bytes;
      DSV4_CHECK(bytes == kv_entry_bytes(f, dims), "paged kv: group {} sizes entries at {} bytes, the codec at {}",
                 group_name(kind, ratio), bytes, kv_entry_bytes(f, dims));
      const int m = lay.member_of_group[static_cast<size_t>(w.group)];
      std::byte* pool = pools.empty() ? manager.pool_memory(u.bucket) : pools.at(static_cast<size_t>(u.bucket));
      DSV4_CHECK(pool, "paged kv: the cache manager has no pool memory");
      w.table.base = reinterpret_cast<uint8_t*>(pool) + u.member_offsets[static_cast<size_t>(m)];
      w.table.page_bytes = lay.buckets[static_cast<size_t>(u.bucket)].page_bytes;
      w.table.entries_per_page = static_cast<int32_t>(u.entries_per_page);
      w.table.entry_bytes = static_cast<int32_t>(bytes);
      w.table.format = f;
      w.table.capacity = stats.pools[static_cast<size_t>(u.bucket)].capacity_pages * u.entries_per_page;
    }
  }
}

void PagedKv::bind(int32_t seq, KvRequestId request) { requests_[seq] = request; }

const PagedKv::Where& PagedKv::where(int layer, KvKind kind) const {
  DSV4_CHECK(layer >= 0 && layer < static_cast<int>(where_.size()), "paged kv: layer {} out of range", layer);
  const Where& w = where_[static_cast<size_t>(layer)][static_cast<size_t>(kind)];
  DSV4_CHECK(w.group >= 0, "paged kv: layer {} has no KV kind {}", layer, static_cast<int>(kind));
  return w;
}

EntryTable PagedKv::table(int layer, KvKind kind) const { return where(layer, kind).table; }

int32_t PagedKv::slot(int32_t seq, int layer, KvKind kind, int64_t index) const {
  return layer_slot(layer, kind, unit_slot(seq, layer, kind, index));
}

int64_t PagedKv::slot_key(int layer, KvKind kind) const {
  const Where& w = where(layer, kind);
  // The unit and how an item becomes a position decide the unit's slot: negative keys, apart from the
  // default's.
  return -1 - ((int64_t{w.unit} * 2 + (w.per_entry ? 1 : 0)) * 1024 + w.ratio);
}

int64_t PagedKv::unit_slot(int32_t seq, int layer, KvKind kind, int64_t index) const {
  const Where& w = where(layer, kind);
  const auto r = requests_.find(seq);
  DSV4_CHECK(r != requests_.end(), "paged kv: sequence {} is not bound to a request", seq);
  return mgr_.slot(r->second, w.unit, w.per_entry ? (index + 1) * w.ratio - 1 : index);
}

int32_t PagedKv::layer_slot(int layer, KvKind kind, int64_t s) const {
  int32_t out = -1;
  layer_slots(layer, kind, {&s, 1}, {&out, 1});
  return out;
}

// The layer's pool, unit and page index looked up once; then a block's page a slot.
void PagedKv::layer_slots(int layer, KvKind kind, std::span<const int64_t> unit, std::span<int32_t> out) const {
  DSV4_CHECK(out.size() >= unit.size(), "paged kv: {} slots into room for {}", unit.size(), out.size());
  const Where& w = where(layer, kind);
  const int64_t epp = w.table.entries_per_page;
  const BlockPool& pool = mgr_.pool(mgr_.layout().units[static_cast<size_t>(w.unit)].bucket);
  const int local = mgr_.local_unit(w.unit);
  const auto li = static_cast<size_t>(w.layer_index);
  for (size_t i = 0; i < unit.size(); ++i) {
    const int64_t s = unit[i];
    if (s < 0) {
      out[i] = -1;
      continue;
    }
    const int64_t b = s / epp;
    const auto block = static_cast<uint32_t>(b);
    DSV4_CHECK(b < pool.num_blocks() && pool.local_unit(block) == local,
               "paged kv: block {} does not belong to unit {}", b, w.unit);
    const int64_t global = int64_t{pool.layer_pages(block)[li]} * epp + s % epp;
    DSV4_CHECK(global < w.table.capacity && global <= INT32_MAX, "paged kv: slot {} out of range", global);
    out[i] = static_cast<int32_t>(global);
  }
}

ItemPages PagedKv::item_pages(int32_t seq, int layer, KvKind kind, int64_t begin, int64_t end) const {
  const Where& w = where(layer, kind);
  if (!w.tiled) return KvAccess::item_pages(seq, layer, kind, begin, end);
  const KvUnit& u = mgr_.layout().units[static_cast<size_t>(w.unit)];
  const int64_t epp = w.table.entries_per_page;
  ItemPages p;
  p.per_page = static_cast<int32_t>(epp);
  p.base = begin / epp * epp;  // (an empty range gets no pages)
  if (begin >= end) return p;
  // The first and last items go through slot(), which checks that they are allocated and live; every page
  // from the first to the last is then live and comes straight from the block table (long lists: one step
  // of an 8 x 128K decode resolves ~10^5 pages).
  slot(seq, layer, kind, begin);
  slot(seq, layer, kind, end - 1);
  if (!u.sliding()) return device_row(seq, w, p.per_page);
  // Tiled: consecutive pages of items are consecutive entries of the block table.
  const KvBlockTable t = mgr_.block_table(requests_.at(seq), w.unit);
  auto table_index = [&](int64_t item) {
    return u.page_of(w.per_entry ? (item + 1) * w.ratio - 1 : item) - t.first_page;
  };
  const int64_t q0 = table_index(begin), q1 = table_index(end - 1);
  DSV4_CHECK(q0 >= 0 && q1 >= q0 && q1 < static_cast<int64_t>(t.blocks.size()) && q1 - q0 == (end - 1 - p.base) / epp,
             "paged kv: items [{}, {}) of sequence {} do not map to consecutive pages", begin, end, seq);
  const auto blocks = t.blocks.subspan(static_cast<size_t>(q0), static_cast<size_t>(q1 - q0 + 1));
  p.pages.assign(blocks.begin(), blocks.end());  // block ids (< 2^31: BlockPool checks)
  return p;
}

// A full unit's block table is its device row: item i at entry i / per_page (its table starts at block 0).
ItemPages PagedKv::device_row(int32_t seq, const Where& w, int32_t per_page) const {
  DSV4_CHECK(tables_.size() > static_cast<size_t>(w.unit) && tables_[static_cast<size_t>(w.unit)],
             "paged kv: block tables asked for before sync()");
  const DeviceBlockTables& t = *tables_[static_cast<size_t>(w.unit)];
  ItemPages p;
  p.per_page = per_page;
  p.device = {t.data(), t.rows(), t.stride(), t.row(requests_.at(seq))};
  return p;
}

int64_t PagedKv::list_key(int layer, KvKind kind) const {
  const Where& w = where(layer, kind);
  // A tiled list is decided by what decides a unit slot (slot_key); an untiled one holds the layer's slots.
  return w.tiled ? slot_key(layer, kind) : KvAccess::list_key(layer, kind);
}

BlockPageMap PagedKv::page_map(int layer, KvKind kind) const {
  const Where& w = where(layer, kind);
  if (!w.tiled) return {};
  const KvUnit& u = mgr_.layout().units[static_cast<size_t>(w.unit)];
  DSV4_CHECK(static_cast<size_t>(u.bucket) < maps_.size(), "paged kv: page maps asked for before sync()");
  return maps_[static_cast<size_t>(u.bucket)]->layer_map(mgr_.local_unit(w.unit), w.layer_index);
}

void PagedKv::sync(Device& dev) {
  const KvLayout& lay = mgr_.layout();
  if (maps_.empty() || &maps_[0]->device() != &dev) {
    maps_.clear();
    for (size_t b = 0; b < lay.buckets.size(); ++b)
      maps_.push_back(std::make_unique<DevicePageMap>(dev, mgr_.pool(static_cast<int>(b))));
    tables_.clear();
    tables_.resize(lay.units.size());
    for (const auto& row : where_)
      for (const Where& w : row)
        if (w.tiled && !lay.units[static_cast<size_t>(w.unit)].sliding() && !tables_[static_cast<size_t>(w.unit)])
          tables_[static_cast<size_t>(w.unit)] = std::make_unique<DeviceBlockTables>(dev, mgr_, w.unit);
  }
  for (auto& m : maps_) m->sync();
  synced_.clear();  // the live requests bound, each once
  for (const auto& [seq, id] : requests_)
    if (mgr_.has_request(id)) synced_.push_back(id);
  std::sort(synced_.begin(), synced_.end());
  synced_.erase(std::unique(synced_.begin(), synced_.end()), synced_.end());
  for (auto& t : tables_)
    if (t) t->sync(synced_);
}

}  // namespace dsv4

namespace dsv4 {

namespace {

// The pools for `sequences` requests of max_len positions: the budget grown until every sequence fits at full
// length (a model of sliding windows only, e.g. a few ratio-0 layers, has no full unit to fill: its first
// split that holds the windows does).
KvPoolSplit owned_split(const KvLayout& layout, int sequences, int64_t max_len, int64_t chunk_tokens) {
  KvPoolSizing sizing;
  sizing.max_num_seqs = sequences;
  sizing.max_num_batched_tokens = chunk_tokens;
  const bool full_units =
      std::any_of(layout.units.begin(), layout.units.end(), [](const KvUnit& u) { return !u.sliding(); });
  for (int64_t budget = int64_t{16} << 20;; budget *= 2) {
    DSV4_CHECK(budget < (int64_t{1} << 40), "paged cache: no pool split holds {} x {} positions", sequences, max_len);
    KvPoolSplit split;
    try {
      split = size_kv_pools(layout, budget, sizing);
    } catch (const Error&) {
      continue;
    }
    if (!full_units || split.full_tokens >= int64_t{sequences} * (max_len + 256)) return split;
  }
}

}  // namespace

int64_t OwnedPagedCache::bytes_for(const ModelConfig& cfg, int sequences, int64_t max_len, int64_t chunk_tokens,
                                   KvDTypes dtypes) {
  return owned_split(make_kv_layout(cfg, dtypes), sequences, max_len, chunk_tokens).bytes;
}

OwnedPagedCache::OwnedPagedCache(const ModelConfig& cfg, int sequences, int64_t max_len, int64_t chunk_tokens,
                                 KvDTypes dtypes, Device* device) {
  if (device) {
    memory_ = kv_memory_for(*device);
  } else {
    memory_ = std::make_unique<HostKvMemory>();
  }
  KvLayout layout = make_kv_layout(cfg, dtypes);
  const KvPoolSplit split = owned_split(layout, sequences, max_len, chunk_tokens);
  KvCacheOptions opts;
  opts.enable_prefix_caching = false;
  opts.max_model_len = max_len;
  opts.memory = memory_.get();
  mgr_ = std::make_unique<KvCacheManager>(std::move(layout), split.pages, opts);
  kv_ = std::make_unique<PagedKv>(cfg, *mgr_, kv_formats(dtypes));
}

void OwnedPagedCache::add(int32_t seq, int64_t prompt_len) {
  mgr_->add_request(static_cast<KvRequestId>(seq), prompt_len);
  kv_->bind(seq, static_cast<KvRequestId>(seq));
}

void OwnedPagedCache::allocate(int32_t seq, int64_t n, std::span<const int32_t> tokens) {
  DSV4_CHECK(mgr_->allocate(static_cast<KvRequestId>(seq), n, tokens),
             "paged cache: no room for {} more positions of {}", n, seq);
}

}  // namespace dsv4
