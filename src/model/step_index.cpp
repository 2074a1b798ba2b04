#include "model/step_index.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <new>
#include <tuple>
#include <utility>

#include "core/error.h"
#include "model/step_shape.h"

namespace dsv4 {

// An allocator whose resize() leaves new ints unwritten: the upload fills what is read (place() with −1
// first, put() with its values), and a padded step's emission rows of items that emit nothing (most of
// ~640 KB at b64: 128 rows an item of every ratio-128 layer) are never read, so never written, nor copied
// (StepUploads::skip).
template <typename T>
struct UnfilledAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = UnfilledAllocator<U>;
  };
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
using UploadBuffer = std::vector<int32_t, UnfilledAllocator<int32_t>>;

// Collects the host-built arrays of one step and the page-list expansions that read them; finish()
// uploads everything in one copy, points the arrays into it and resolves the expansions' pointers.
class StepUploads {
 public:
  // The upload is built in this thread's buffer of the last step (its capacity kept: a long-context
  // step's lists are megabytes, and a fresh buffer would be allocated, faulted in and grown every step),
  // reserved at least at the arena's size.
  StepUploads(bool padded, const StepArena* arena) : padded_(padded) {
    host_.swap(buffer_);
    host_.clear();
    host_.reserve(arena ? arena->storage_.size() : 0);
  }
  ~StepUploads() { buffer_.swap(host_); }
  StepUploads(const StepUploads&) = delete;
  StepUploads& operator=(const StepUploads&) = delete;
  void set_layer(int layer) { layer_ = layer; }  // of the expansions that follow
  // Bytes the upload copies on the host: the whole span but the skipped values.
  int64_t bytes() const {
    size_t n = host_.size() * sizeof(int32_t);
    for (const Device::Range& r : holes_) n -= r.end - r.begin;
    return static_cast<int64_t>(n);
  }

  void add(IndexArray& a, const std::vector<int32_t>& v) {
    a.offset_ = put(v);
    pending_.push_back(&a);
  }
  // An array of n values written in place by fill(int32_t* values), which starts unwritten: fill writes
  // every value a reader reads (the pointer is good until the next array is added).
  template <typename Fill>
  void add_in_place(IndexArray& a, size_t n, Fill&& fill) {
    a.offset_ = place_unfilled(n);
    pending_.push_back(&a);
    fill(host_.data() + a.offset_);
  }
  // Values [at, at + n) of the array `a` just added stay unwritten and are never read: the upload leaves
  // them out of its staging copy (Device::to_device_skipping).
  void skip(const IndexArray& a, size_t at, size_t n) {
    const size_t begin = (a.offset_ + at) * sizeof(int32_t), end = begin + n * sizeof(int32_t);
    if (!holes_.empty() && holes_.back().end == begin) {
      holes_.back().end = end;
    } else {
      holes_.push_back({begin, end});
    }
  }

  // out = rows of items from page lists (see PagedSlotsParams), built on the device by
  // StepIndex::expand through `map`. Expansions of one key share their lists: `make` builds them for
  // the first one only (layers of one list_key get the same lists, each its pages through its map).
  struct PageLists {  // what an expansion's rows read (see PagedSlotsParams)
    std::vector<ItemPages> lists;
    std::vector<int32_t> list_of, first, count;  // [rows]; first empty: 0
  };
  struct ListKey {
    int64_t list = 0;  // KvAccess::list_key
    int use = 0;       // which ranges of the list (the caller's)
    int64_t width = 0;
    bool operator==(const ListKey&) const = default;
  };
  template <typename Make>
  void expand(IndexArray& out, const ListKey& key, const BlockPageMap& map, Make&& make) {
    auto it = std::find_if(shared_.begin(), shared_.end(), [&](const Shared& x) { return x.key == key; });
    if (it == shared_.end()) {
      PageLists l;
      make(l);
      shared_.push_back(place_lists(key, l));
      it = shared_.end() - 1;
    }
    expansions_.push_back({layer_, &out, static_cast<size_t>(it - shared_.begin()), map});
  }

  std::vector<StepIndex::Expansion> finish(Device& dev, StepArena* arena, DeviceArray<int32_t>& own) {
    const int32_t* d = upload(dev, arena, own);
    for (IndexArray* a : pending_) a->ptr_ = d + a->offset_;
    std::vector<StepIndex::Expansion> out;
    for (const Expansion& x : expansions_) {
      const Shared& l = shared_[x.lists];
      StepIndex::Expansion e;
      e.layer = x.layer;
      e.out = x.out;
      const bool on_device = l.device.table != nullptr;
      e.p = {l.rows,
             static_cast<int32_t>(l.key.width),
             d + l.list,
             l.first == kNone ? nullptr : d + l.first,
             d + l.count,
             on_device ? l.device.table : d + l.pages,
             on_device ? nullptr : d + l.base,
             l.lists,
             static_cast<int32_t>(l.stride),
             l.per_page,
             nullptr,
             x.map,
             on_device ? d + l.device_rows : nullptr,
             on_device ? l.device.rows : 0};
      out.push_back(e);
    }
    return out;
  }

 private:
  static constexpr size_t kNone = SIZE_MAX;
  struct Shared {  // one key's lists in the upload
    ListKey key;
    int64_t rows = 0, lists = 0, stride = 1;
    int32_t per_page = 1;
    size_t pages = 0, base = 0, list = 0, count = 0, first = kNone;
    ItemPages::DeviceRow device;  // lists kept on the device: `rows` their rows there (pages unused)
    size_t device_rows = kNone;
  };
  struct Expansion {
    int layer = 0;
    IndexArray* out = nullptr;
    size_t lists = 0;  // in shared_
    BlockPageMap map;
  };

  Shared place_lists(const ListKey& key, const PageLists& l) {
    Shared x;
    x.key = key;
    x.rows = static_cast<int64_t>(l.list_of.size());
    x.lists = static_cast<int64_t>(l.lists.size());
    for (const auto& p : l.lists)
      if (p.device.table) x.device = p.device;
    if (x.device.table) return place_rows(x, l);
    int64_t stride = 1;
    for (const auto& p : l.lists) stride = std::max(stride, static_cast<int64_t>(p.pages.size()));
    x.per_page = per_page_of(l.lists);
    // A padded step: as many pages as `width` items can span, whatever the lists hold now.
    if (padded_) stride = std::max(stride, (key.width + x.per_page - 1) / x.per_page + 1);
    x.stride = stride;
    // The page lists go straight into the upload, one row of `stride` a list (−1 past its pages).
    x.pages = place(l.lists.size() * static_cast<size_t>(stride));
    std::vector<int32_t> base;
    for (size_t i = 0; i < l.lists.size(); ++i) {
      std::copy(l.lists[i].pages.begin(), l.lists[i].pages.end(),
                host_.begin() + static_cast<int64_t>(x.pages + i * stride));
      base.push_back(static_cast<int32_t>(l.lists[i].pages.empty() ? 0 : l.lists[i].base));
    }
    x.base = put(base);
    x.list = put(l.list_of);
    x.count = put(l.count);
    x.first = l.first.empty() ? kNone : put(l.first);
    layout_.insert(layout_.end(), {x.rows, key.width, x.lists, x.stride, x.per_page, x.first == kNone ? 0 : 1});
    return x;
  }

  // Items per page of the lists that have pages (an empty list can say anything).
  static int32_t per_page_of(const std::vector<ItemPages>& lists) {
    int32_t per_page = 0;
    for (const auto& p : lists) {
      if (p.pages.empty() && !p.device.table) continue;
      DSV4_CHECK(per_page == 0 || p.per_page == per_page, "kv: page lists of one kind disagree on items per page");
      per_page = p.per_page;
    }
    return std::max(per_page, 1);
  }

  // Lists that live on the device: the upload holds which row each reads (an empty list: any row).
  Shared place_rows(Shared& x, const PageLists& l) {
    std::vector<int32_t> rows;
    for (const auto& p : l.lists) {
      DSV4_CHECK(p.pages.empty() && (!p.device.table || p.device.table == x.device.table),
                 "kv: lists of one kind are partly on the device");
      rows.push_back(p.device.table ? p.device.row : 0);
    }
    x.per_page = per_page_of(l.lists);
    x.stride = x.device.stride;
    x.device_rows = put(rows);
    x.list = put(l.list_of);
    x.count = put(l.count);
    x.first = l.first.empty() ? kNone : put(l.first);
    // The table's address and size too: a recording that baked them in is stale once it moves.
    layout_.insert(layout_.end(), {x.rows, x.key.width, x.lists, x.per_page, x.first == kNone ? 0 : 1,
                                   reinterpret_cast<intptr_t>(x.device.table), x.device.rows, x.device.stride});
    return x;
  }

  // An array of n values (−1 until written) at the end of the upload; 256-byte aligned arrays.
  size_t place(size_t n) {
    const size_t at = place_unfilled(n);
    std::fill(host_.begin() + static_cast<int64_t>(at), host_.end(), -1);
    return at;
  }
  // The same, its values unwritten (the padding to the next array −1).
  size_t place_unfilled(size_t n) {
    const size_t at = host_.size();
    layout_.push_back(static_cast<int64_t>(n));
    host_.resize(at + (n + 63) / 64 * 64);
    std::fill(host_.begin() + static_cast<int64_t>(at + n), host_.end(), -1);
    return at;
  }
  size_t put(const std::vector<int32_t>& v) {
    const size_t at = place_unfilled(v.size());
    std::copy(v.begin(), v.end(), host_.begin() + static_cast<int64_t>(at));
    return at;
  }

  // The one copy, into the arena when its layout still fits (else the arena gets new storage).
  const int32_t* upload(Device& dev, StepArena* arena, DeviceArray<int32_t>& own) {
    int32_t* d = nullptr;
    if (!arena) {
      own = DeviceArray<int32_t>(dev, std::max<size_t>(host_.size(), 1));
      d = own.data();
    } else {
      if (arena->layout_ != layout_) {  // the sizes of every array: equal layouts, equal uploads
        arena->storage_ = DeviceArray<int32_t>(dev, std::max<size_t>(host_.size(), 1));
        arena->layout_ = layout_;
        ++arena->generation_;
      }
      d = arena->storage_.data();
    }
    if (!host_.empty()) dev.to_device_skipping(d, host_.data(), host_.size() * sizeof(int32_t), holes_);
    return d;
  }

  static thread_local UploadBuffer buffer_;
  bool padded_;
  int layer_ = 0;
  UploadBuffer host_;
  std::vector<Device::Range> holes_;  // bytes of host_ never written nor read (skip), ascending
  std::vector<int64_t> layout_;
  std::vector<IndexArray*> pending_;
  std::vector<Shared> shared_;
  std::vector<Expansion> expansions_;
};

thread_local UploadBuffer StepUploads::buffer_;

namespace {

// Lookups shared by the layers of one KvAccess::slot_key within a step: each item is looked up once
// (unit_slot) and every layer maps it to its own page (layer_slot), so the host's per-token work is
// O(units x tokens), not O(layers x tokens).
class UnitSlots {
 public:
  UnitSlots(const ForwardBatch& b, const KvAccess& kv) : b_(b), kv_(kv) {}

  // The slot each token writes (−1 for shadow slices: they write nothing), into the upload as `a`.
  void per_token(StepUploads& up, IndexArray& a, int layer, KvKind kind) {
    auto [it, fresh] = tokens_.try_emplace(kv_.slot_key(layer, kind));
    if (fresh) {
      it->second.assign(static_cast<size_t>(b_.tokens()), -1);
      for (const auto& s : b_.seqs) {
        if (s.shadow) continue;
        for (int64_t i = 0; i < s.count; ++i)
          it->second[static_cast<size_t>(s.offset + i)] = kv_.unit_slot(s.seq, layer, kind, s.start + i);
      }
    }
    to_layer(up, a, layer, kind, it->second);
  }

  // Blocks i completed in this forward: (i + 1) * ratio - 1 in [start, end). Padded (one token a
  // slice): one item per token, block −1 (rows and slot −1) where the token completes none.
  void emit_list(StepUploads& up, EmitList& e, int layer, int ratio, KvKind state, KvKind out, bool padded) {
    auto [it, fresh] = emissions_.try_emplace({kv_.slot_key(layer, state), kv_.slot_key(layer, out), ratio});
    if (fresh) it->second = emissions(layer, ratio, state, out, padded);
    const Emission& m = it->second;
    e.entries = static_cast<int64_t>(m.block.size());
    up.add(e.block_index, m.block);
    // Rows only of the items that emit: a padded step's other items (block −1) leave theirs unwritten
    // (the emit ops skip them).
    const size_t per = m.block.empty() ? 0 : m.rows.size() / m.block.size();
    up.add_in_place(e.rows, m.rows.size(), [&](int32_t* rows) {
      const std::span<const int64_t> unit(m.rows);
      for (size_t k = 0; k < m.block.size(); ++k)
        if (m.block[k] >= 0) kv_.layer_slots(layer, state, unit.subspan(k * per, per), {rows + k * per, per});
    });
    for (size_t k = 0; k < m.block.size(); ++k)
      if (m.block[k] < 0) up.skip(e.rows, k * per, per);
    to_layer(up, e.out_slots, layer, out, m.slots);
  }

 private:
  struct Emission {
    std::vector<int32_t> block;
    std::vector<int64_t> rows, slots;  // unit slots
  };

  Emission emissions(int layer, int ratio, KvKind state, KvKind out, bool padded) const {
    const int c = ratio == 4 ? 2 : 1;
    Emission m;
    for (const auto& s : b_.seqs) {
      const int64_t end = s.start + s.count;
      const size_t before = m.block.size();
      for (int64_t i = s.start / ratio; !s.shadow && i < end / ratio; ++i) {
        m.block.push_back(static_cast<int32_t>(i));
        for (int64_t p = (i - (c - 1)) * ratio; p < (i + 1) * ratio; ++p) {
          const int64_t slot = p < 0 ? -1 : kv_.unit_slot(s.seq, layer, state, p);
          DSV4_CHECK(p < 0 || slot >= 0, "kv: compressor row for position {} of sequence {} is not resident", p, s.seq);
          m.rows.push_back(slot);
        }
        m.slots.push_back(kv_.unit_slot(s.seq, layer, out, i));
      }
      if (padded && m.block.size() == before) {
        m.block.push_back(-1);
        m.rows.insert(m.rows.end(), static_cast<size_t>(c * ratio), -1);
        m.slots.push_back(-1);
      }
    }
    DSV4_CHECK(!padded || m.block.size() == b_.seqs.size(),
               "step index: a padded step with more than one token a slice");
    return m;
  }

  // Unit slots as the layer's (every value written), straight into the upload.
  void to_layer(StepUploads& up, IndexArray& a, int layer, KvKind kind, const std::vector<int64_t>& unit) const {
    up.add_in_place(a, unit.size(), [&](int32_t* out) { kv_.layer_slots(layer, kind, unit, {out, unit.size()}); });
  }

  const ForwardBatch& b_;
  const KvAccess& kv_;
  std::map<int64_t, std::vector<int64_t>> tokens_;
  std::map<std::tuple<int64_t, int64_t, int>, Emission> emissions_;
};

// Every page a step reads must be resident: the scheduler allocated it before the step.
void check_resident(const ItemPages& p, int32_t seq, const char* what) {
  for (const int32_t page : p.pages) DSV4_CHECK(page >= 0, "kv: a {} entry of sequence {} is not resident", what, seq);
}

// The ranges of the page lists an expansion reads (equal uses of one list_key: equal lists).
enum ListUse : int { kWindowReach, kVisibleEntries, kEveryEntry };

// Window: the same list layout whatever the chunking (positions t-W+1..t ascending, then -1), which
// is what the reference lays out in prefill and in decode.
void expand_window(StepUploads& up, LayerIndex& r, const ForwardBatch& b, const KvAccess& kv, int l, int W) {
  const auto make = [&](StepUploads::PageLists& x) {
    const auto tokens = static_cast<size_t>(b.tokens());
    x.list_of.resize(tokens);
    x.first.resize(tokens);
    x.count.resize(tokens);
    for (size_t k = 0; k < b.seqs.size(); ++k) {
      const auto& s = b.seqs[k];
      x.lists.push_back(
          kv.item_pages(s.seq, l, KvKind::kWindow, std::max<int64_t>(0, s.start - W + 1), s.start + s.count));
      check_resident(x.lists.back(), s.seq, "window");
      for (int64_t i = 0; i < s.count; ++i) {
        const int64_t t = s.start + i, from = std::max<int64_t>(0, t - W + 1);
        const auto at = static_cast<size_t>(s.offset + i);
        x.list_of[at] = static_cast<int32_t>(k);
        x.first[at] = static_cast<int32_t>(from);
        x.count[at] = static_cast<int32_t>(t - from + 1);
      }
    }
  };
  up.expand(r.window_read, {kv.list_key(l, KvKind::kWindow), kWindowReach, W}, kv.page_map(l, KvKind::kWindow), make);
}

// Entries [0, n) of each slice's `kind`, n = the entries at its end (`what`: check they are resident).
void entry_lists(StepUploads::PageLists& x, const ForwardBatch& b, const KvAccess& kv, int l, KvKind kind, int ratio,
                 const char* what) {
  for (const auto& s : b.seqs) {
    x.lists.push_back(kv.item_pages(s.seq, l, kind, 0, (s.start + s.count) / ratio));
    if (what) check_resident(x.lists.back(), s.seq, what);
  }
}

// Ratio 128: every entry visible to each query, ascending (entry j needs (j + 1) * ratio - 1 <= t).
void expand_visible(StepUploads& up, LayerIndex& r, const ForwardBatch& b, const KvAccess& kv, int l, int ratio) {
  const auto make = [&](StepUploads::PageLists& x) {
    entry_lists(x, b, kv, l, KvKind::kCompressed, ratio, "compressed");
    for (size_t k = 0; k < b.seqs.size(); ++k) {
      const auto& s = b.seqs[k];
      for (int64_t i = 0; i < s.count; ++i) {
        x.list_of.push_back(static_cast<int32_t>(k));
        x.count.push_back(static_cast<int32_t>((s.start + i + 1) / ratio));
      }
    }
  };
  up.expand(r.compressed_slots, {kv.list_key(l, KvKind::kCompressed), kVisibleEntries, r.compressed_width},
            kv.page_map(l, KvKind::kCompressed), make);
}

// Ratio 4: one row per slice, its indexer keys, and the compressed-entry slots of the same entries.
void expand_keys(StepUploads& up, LayerIndex& r, const ForwardBatch& b, const KvAccess& kv, int l, int ratio) {
  std::vector<int32_t> count;
  for (const auto& s : b.seqs) count.push_back(static_cast<int32_t>((s.start + s.count) / ratio));
  for (const KvKind kind : {KvKind::kIndexerKey, KvKind::kCompressed}) {
    const auto make = [&](StepUploads::PageLists& x) {
      entry_lists(x, b, kv, l, kind, ratio, kind == KvKind::kIndexerKey ? "indexer key" : nullptr);
      for (size_t k = 0; k < b.seqs.size(); ++k) x.list_of.push_back(static_cast<int32_t>(k));
      x.count = count;
    };
    up.expand(kind == KvKind::kIndexerKey ? r.key_slots : r.key_map, {kv.list_key(l, kind), kEveryEntry, r.key_stride},
              kv.page_map(l, kind), make);
  }
  up.add(r.key_count, count);
}

void build_layer(StepUploads& up, UnitSlots& unit, LayerIndex& r, const ModelConfig& cfg, const ForwardBatch& b,
                 const KvAccess& kv, int l, bool padded) {
  unit.per_token(up, r.window_write, l, KvKind::kWindow);
  expand_window(up, r, b, kv, l, cfg.window_size);
  const int ratio = cfg.compress_ratio(l);
  if (ratio == 0) return;
  unit.per_token(up, r.state_slots, l, KvKind::kCompressorState);
  unit.emit_list(up, r.emit, l, ratio, KvKind::kCompressorState, KvKind::kCompressed, padded);
  // Rows of entries as wide as the widest slice's (at least 1 for the indexer's keys), bucketed when padded.
  const int64_t least = ratio == 4 ? 1 : 0;
  int64_t width = least;
  for (const auto& s : b.seqs) width = std::max(width, (s.start + s.count) / ratio);
  if (padded) width = std::max<int64_t>(least, width_bucket(width));
  if (ratio != 4) {
    r.compressed_width = static_cast<int32_t>(width);
    expand_visible(up, r, b, kv, l, ratio);
    return;
  }
  unit.per_token(up, r.index_state_slots, l, KvKind::kIndexerState);
  unit.emit_list(up, r.index_emit, l, ratio, KvKind::kIndexerState, KvKind::kIndexerKey, padded);
  r.key_stride = static_cast<int32_t>(width);
  expand_keys(up, r, b, kv, l, ratio);
}

}  // namespace

StepIndex::StepIndex(Device& dev, const ModelConfig& cfg, const ForwardBatch& b, KvAccess& kv, StepLayout layout) {
  tokens = b.tokens();
  slices = static_cast<int64_t>(b.seqs.size());
  std::vector<int32_t> slice_of(static_cast<size_t>(tokens));
  for (size_t k = 0; k < b.seqs.size(); ++k) {
    const auto& s = b.seqs[k];
    DSV4_CHECK(s.offset >= 0 && s.count > 0 && s.offset + s.count <= tokens, "forward batch: bad slice {}", k);
    DSV4_CHECK(!s.shadow || (layout.padded && s.count == 1), "forward batch: shadow slice {} outside a padded step", k);
    std::fill_n(slice_of.begin() + s.offset, s.count, static_cast<int32_t>(k));
    if (s.logits) logit_rows.push_back(s.offset + s.count - 1);
  }
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  kv.sync(dev);  // the page maps the expansions read, before them
  sync_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  StepUploads up(layout.padded, layout.arena);
  up.add(token_ids, b.token_ids);
  up.add(positions, b.positions);
  up.add(token_slice, slice_of);
  window_width = cfg.window_size;
  layers.resize(static_cast<size_t>(cfg.n_layers));  // sized once: the uploads point into it
  UnitSlots unit(b, kv);
  for (int l = 0; l < cfg.n_layers; ++l) {
    up.set_layer(l);
    build_layer(up, unit, layers[static_cast<size_t>(l)], cfg, b, kv, l, layout.padded);
  }
  const auto t1 = Clock::now();
  expansions_ = up.finish(dev, layout.arena, uploads_);
  upload_ms = std::chrono::duration<double, std::milli>(Clock::now() - t1).count();
  upload_bytes = up.bytes();
  dev_ = &dev;
}

StepIndex::~StepIndex() = default;

void StepIndex::expand(Ops& ops, int layer) {
  for (Expansion& x : expansions_) {
    if (x.layer != layer) continue;
    IndexArray& a = *x.out;
    a.owned_ = DeviceArray<int32_t>(*dev_, static_cast<size_t>(std::max<int64_t>(1, x.p.rows * x.p.width)));
    a.ptr_ = a.owned_.data();
    if (x.p.rows == 0 || x.p.width == 0) continue;
    PagedSlotsParams p = x.p;
    p.out = a.owned_.data();
    ops.paged_slots(p);
  }
}

void StepIndex::release_expanded(int layer) {
  for (Expansion& x : expansions_) {
    if (layer != kEveryLayer && x.layer != layer) continue;
    x.out->owned_ = DeviceArray<int32_t>();
    x.out->ptr_ = nullptr;
  }
}

}  // namespace dsv4
